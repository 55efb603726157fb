"""The GPU rates ``presdep plan`` prices work at: measured (a ``benchmarks/gpu.py`` JSON) or assumed.

A JSON's top-level ``rates`` object gives prompt tokens/s per readout path and for LoRA
training, measured on the benchmark's model (the Qwen3-4B shape), and the bf16 matmul rate;
a null value falls back to the assumed rate for that one. A measured rate is moved to another
model by the ratio of FLOPs per token at the same prompt length. Assumed rates are GPU-bound:
the peak below x an assumed model-FLOPs utilisation / FLOPs per token from the formula of
:mod:`presdep.runtime.flops` at the work's prompt length. The vLLM logprobs path is capped by
its host work whatever the GPU does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from presdep.contracts.errors import ConfigError
from presdep.report.plan_shapes import flops_per_token
from presdep.runtime.flops import TRAIN_FLOPS_PER_FORWARD
from presdep.training.memory_model import ModelShape, known_shape

# NVIDIA's H100 SXM datasheet: 1,979 TFLOP/s bf16 with 2:4 sparsity, so 989 dense.
PEAK_BF16_FLOPS = 989e12
DEFAULT_DEVICE = "H100 SXM 80 GB (assumed)"
# Assumed model-FLOPs utilisation of a prefill-only readout: prompts of 2,000-3,000 tokens in
# length-sorted batches keep the matmuls large; attention and padding take the rest.
READOUT_MFU = 0.40
# Assumed for a LoRA step: forward, backward and (checkpointed) recompute over micro-batches of
# a few long prompts, plus the optimizer; lower than a readout's.
TRAIN_MFU = 0.30
# vLLM prompt_logprobs=20 builds ~21 logprob objects per prompt position on the host: measured
# 142 ms per 2,200-token prompt on one CPU core, so 2,200 / 0.142 = 15,500 tokens/s at most.
LOGPROBS_HOST_CAP = 15_500.0
# Assumed: greedy Hugging Face generate of a 7-8B bf16 model in batches of 8-16 takes ~40 ms a
# step (reading its 16 GB of weights at ~3 TB/s is 5 ms; per-step launches and Python the rest).
DECODE_STEPS_PER_S = 25.0
# The model benchmarks/gpu.py measures its rates on (its FULL shape).
BENCHMARK_MODEL = "Qwen/Qwen3-4B"

# Readout path -> the JSON key of its measured rate.
READOUT_KEYS = {"slot": "readout_slot_tokens_per_s", "full_vocab": "readout_full_vocab_tokens_per_s",
                "grade_rows": "readout_grade_rows_tokens_per_s"}
TRAIN_KEY = "train_tokens_per_s"
MATMUL_KEY = "matmul_bf16_flops_per_s"
RATE_KEYS = ("device", *READOUT_KEYS.values(), TRAIN_KEY, MATMUL_KEY)
PATH_NAMES = {"slot": "slot-only readout (transformers)", "grade_rows": "grade-row pooling (vLLM readout: pooling)",
              "full_vocab": "prompt logprobs (vLLM readout: logprobs)"}


@dataclass(frozen=True)
class Rates:
    """Where rates come from: ``measured`` tokens/s by JSON key (the benchmark model's)."""

    device: str = DEFAULT_DEVICE
    peak_flops: float = PEAK_BF16_FLOPS
    peak_source: str = "H100 dense bf16 peak"
    measured: Mapping[str, float] = field(default_factory=dict)
    origin: str | None = None  # the JSON's path

    def readout(self, path: str, shape: ModelShape, length: float) -> tuple[float, str]:
        """(prompt tokens/s, where from) of a prefill readout on ``path`` at a prompt length."""
        key = READOUT_KEYS[path]
        if key in self.measured:
            rate, source = self._scaled(self.measured[key], key, shape, length, path)
        else:
            rate = self.peak_flops * READOUT_MFU / flops_per_token(shape, length, path)
            source = self._assumed(READOUT_MFU, PATH_NAMES[path])
        if path == "full_vocab" and rate > LOGPROBS_HOST_CAP:
            rate, source = LOGPROBS_HOST_CAP, f"{source}; capped at {LOGPROBS_HOST_CAP:,.0f} tokens/s (host logprobs)"
        return rate, source

    def train(self, shape: ModelShape, length: float, checkpointing: bool) -> tuple[float, str]:
        """(prompt tokens/s, where from) of LoRA training at a prompt length."""
        factor = TRAIN_FLOPS_PER_FORWARD[bool(checkpointing)]
        if TRAIN_KEY in self.measured:
            # benchmarks/gpu.py times its step with checkpointing on: a step without it does 3/4 the work
            rate, source = self._scaled(self.measured[TRAIN_KEY], TRAIN_KEY, shape, length, "slot")
            if checkpointing:
                return rate, source
            return rate * TRAIN_FLOPS_PER_FORWARD[True] / factor, f"{source}, x4/3 without checkpointing"
        rate = self.peak_flops * TRAIN_MFU / (factor * flops_per_token(shape, length))
        return rate, self._assumed(TRAIN_MFU, f"LoRA training, x{factor:g} a forward's FLOPs")

    def _assumed(self, mfu: float, what: str) -> str:
        return (f"{what}: assumed {self.peak_flops / 1e12:,.0f} TFLOP/s ({self.peak_source}) x MFU {mfu:.2f} "
                "/ FLOPs per token at each prompt length")

    def _scaled(self, rate: float, key: str, shape: ModelShape, length: float, path: str) -> tuple[float, str]:
        source = f"measured: {self.origin} ({self.device}) {key}"
        bench = known_shape(BENCHMARK_MODEL)
        if bench is None or _same(bench, shape):
            return rate, source
        ratio = flops_per_token(bench, length, path) / flops_per_token(shape, length, path)
        return rate * ratio, f"{source}, moved to this model by FLOPs per token"


def _same(a: ModelShape, b: ModelShape) -> bool:
    keys = ("hidden", "intermediate", "heads", "kv_heads", "head_dim", "layers", "vocab")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def load_rates(path: str | Path | None) -> Rates:
    """The rates of a ``benchmarks/gpu.py`` JSON (its ``rates`` object), else the assumed ones."""
    if path is None:
        return Rates()
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--rates {path}: not a readable JSON file ({exc})") from exc
    rates = data.get("rates") if isinstance(data, Mapping) else None
    if not isinstance(rates, Mapping):
        raise ConfigError(f"--rates {path}: no top-level 'rates' object (benchmarks/gpu.py writes one)")
    unknown = sorted(set(rates) - set(RATE_KEYS))
    if unknown:
        raise ConfigError(f"--rates {path}: unknown key(s) {unknown} in 'rates'; known: {list(RATE_KEYS)}")
    measured = {k: float(v) for k, v in rates.items() if k != "device" and _positive(v, k, path)}
    device = str(rates.get("device") or "device not named")
    peak = measured.pop(MATMUL_KEY, None)
    return Rates(device=device, peak_flops=peak or PEAK_BF16_FLOPS,
                 peak_source=f"{MATMUL_KEY} measured on {device}" if peak else "H100 dense bf16 peak",
                 measured=measured, origin=str(path))


def _positive(value: Any, key: str, path: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"--rates {path}: rates.{key} must be a positive number or null, got {value!r}")
    return True


def assumptions(rates: Rates) -> list[str]:
    """The assumed figures, one line each, for the text output and the guide."""
    lines = [f"GPU: {rates.device}; peak {rates.peak_flops / 1e12:,.0f} TFLOP/s ({rates.peak_source})"]
    for path, key in READOUT_KEYS.items():
        how = f"measured ({key})" if key in rates.measured else f"GPU-bound at MFU {READOUT_MFU:.2f}"
        cap = f", at most {LOGPROBS_HOST_CAP:,.0f} tokens/s (host logprobs)" if path == "full_vocab" else ""
        lines.append(f"{PATH_NAMES[path]}: {how}{cap}")
    lines.append("LoRA training: " + (f"measured ({TRAIN_KEY})" if TRAIN_KEY in rates.measured else
                                      f"GPU-bound at MFU {TRAIN_MFU:.2f}, x3 FLOPs of a forward (x4 checkpointed)"))
    lines.append(f"generation (reader, generative listwise): {DECODE_STEPS_PER_S:g} greedy steps/s per batch, "
                 "assumed; every answer runs to max_new_tokens")
    return lines


__all__ = ["DECODE_STEPS_PER_S", "LOGPROBS_HOST_CAP", "PEAK_BF16_FLOPS", "READOUT_MFU", "TRAIN_MFU", "Rates",
           "assumptions", "load_rates"]
