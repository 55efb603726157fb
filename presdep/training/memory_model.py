"""Predicted peak memory of one LoRA training step (stdlib only: ``presdep plan`` needs no torch).

The step (:mod:`presdep.training.loop`): forward through ``slot_grade_logits``, backward, AdamW.

* ``weights``: the frozen base, ``base_params * base dtype bytes``.
* ``lora_and_optimizer``: adapter fp32 weights, gradients, AdamW's two moments (16 B per parameter),
  + a bf16 weight and gradient copy (4 B) when the adapter matmuls run in bf16.
* ``saved_activations``: per token, each layer's ``per_layer_bytes_per_token`` + the [B, 1, T, T]
  mask SDPA makes per layer from a padding mask (``T * dtype bytes``), layer 0 less what it skips
  when no checkpointing makes the embeddings require grad; a checkpointed layer only its input
  (``hidden * dtype bytes``; ``checkpoint_every_layers = n`` is transformers' ``every_n_layers``:
  layers 0, n, 2n, ... checkpointed, the rest keep all); + final norm, rotary tables, (checkpointed) mask.
* ``recompute``: with checkpointing, one layer's saved activations rebuilt during its backward.
* ``transient``: the largest intermediates above those: without checkpointing the larger of the
  forward's (a LoRA'd MLP projection's temporaries) and the backward's (the final norm's fp32
  backward); with checkpointing the recompute's (forward temporaries + incoming gradient).
* ``read_rows``: per read row its hidden state, the full-vocabulary logits the LM head makes for
  it (the four grade logits are taken from those), and their gradients.

Per-layer and transient figures come from ``memory_constants.json`` (measured on the CPU by
``benchmarks/memory_model.py``) when shape and settings match an entry, else from the analytic
count of what a layer saves (exact at the four widths measured) and transient fits (within 13%).
``device="cuda"`` corrects CPU figures for the one known difference: CPU dropout keeps its mask in
the input's dtype, CUDA's 1 byte. Not counted (leave to ``margin``): the CUDA context, cuBLAS
workspaces, allocator fragmentation, the optimizer step's temporaries.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

CONSTANTS_PATH = Path(__file__).with_name("memory_constants.json")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj")
SHAPE_MATCH = ("hidden", "intermediate", "heads", "kv_heads", "head_dim", "qk_norm")  # what the layer figure needs
# Transient fits, bytes per token = cH * hidden + cI * intermediate (bf16 base), keyed by
# (adapter dtype differs from the base's, dropout > 0): (no checkpointing: forward, checkpointing: recompute).
_TRANSIENT_FIT = {(True, True): ((18, 6), (10, 6)), (False, True): ((10, 2), (5, 2.5)),
                  (True, False): ((4, 8), (8, 8)), (False, False): ((12, 0), (-2, 4))}
_BACKWARD_TRANSIENT_H = 20  # the final norm's backward: bytes per token per hidden unit


def _bytes(dtype: str) -> int:
    if str(dtype).replace("torch.", "") not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[str(dtype).replace("torch.", "")]


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes (the extra fields' defaults: Qwen3, the paper's student)."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    tied: bool
    qk_norm: bool = True          # per-head RMSNorm on q and k (Qwen3); Llama and Qwen2 have none
    attention_bias: bool = False  # q/k/v biases (Qwen2)

    @classmethod
    def from_config(cls, cfg: Mapping | Any) -> "ModelShape":
        """From an HF config dict (config.json contents) or an object with those attributes."""
        get = cfg.get if isinstance(cfg, Mapping) else (lambda k, d=None: getattr(cfg, k, d))
        if get("text_config"):  # multimodal wrappers keep the language model's sizes there
            return cls.from_config(get("text_config"))
        hidden, heads = int(get("hidden_size")), int(get("num_attention_heads"))
        kind = str(get("model_type") or "")
        return cls(hidden=hidden, intermediate=int(get("intermediate_size")), heads=heads,
                   kv_heads=int(get("num_key_value_heads") or heads), head_dim=int(get("head_dim") or hidden // heads),
                   layers=int(get("num_hidden_layers")), vocab=int(get("vocab_size")),
                   tied=bool(get("tie_word_embeddings", True)), qk_norm=kind.startswith("qwen3"),
                   attention_bias=bool(get("attention_bias", kind.startswith("qwen2"))))

    def linear_dims(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each decoder-layer projection."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def base_params(self) -> int:
        """Embeddings + layers (projections, q/k/v biases, both norms, q/k norms) + final norm + untied head."""
        dims = self.linear_dims()
        per_layer = sum(a * b for a, b in dims.values()) + 2 * self.hidden
        if self.attention_bias:
            per_layer += sum(dims[k][1] for k in ("q_proj", "k_proj", "v_proj"))
        if self.qk_norm:
            per_layer += 2 * self.head_dim
        embed = self.vocab * self.hidden
        return embed + self.layers * per_layer + self.hidden + (0 if self.tied else embed)

    def lora_params(self, r: int, targets: Sequence[str]) -> int:
        dims = self.linear_dims()
        if set(targets) - set(dims):
            raise ValueError(f"LoRA targets {sorted(set(targets) - set(dims))} are no projection of {sorted(dims)}")
        return self.layers * sum(int(r) * (dims[t][0] + dims[t][1]) for t in set(targets))


@dataclass(frozen=True)
class MemorySettings:
    lora_r: int = 16                   # 0 = no adapters (a frozen base whose inputs require grad: a reference)
    lora_targets: tuple[str, ...] = DEFAULT_TARGETS
    adapter_dtype: str = "float32"     # dtype the LoRA matmuls run in: float32 | bfloat16 (master weights fp32 always)
    dropout: float = 0.05
    checkpoint_every_layers: int = 0   # 0 = no gradient checkpointing; n = transformers' every_n_layers
    base_dtype: str = "bfloat16"
    masked: bool = True                # a padding mask is passed (transformers drops an all-ones one)
    device: str = "cuda"               # cuda | cpu: dropout masks are 1 byte per element on CUDA


@dataclass(frozen=True)
class PeakPrediction:
    total_bytes: int
    parts: Mapping[str, int]  # weights, lora_and_optimizer, saved_activations, recompute, transient, read_rows
    per_layer_bytes_per_token: float
    source: str  # "measured: <key> (torch x, transformers y, peft z; ...)" or "analytic"

    @property
    def gib(self) -> float:
        return self.total_bytes / 2**30


def settings_key(s: MemorySettings) -> str:
    """The constants file's key: what changes a layer's figure (not checkpointing, not the device)."""
    lora = "frozen" if s.lora_r == 0 else f"r{s.lora_r}-{s.adapter_dtype}-dropout{s.dropout:g}"
    return f"{lora}-{s.base_dtype}-{'masked' if s.masked else 'unmasked'}"


def _mask_bytes(s: MemorySettings, device: str) -> int:  # CPU dropout: input * a mask in the input's dtype
    return 1 if device == "cuda" else _bytes(s.adapter_dtype)


def _layer_saved(shape: ModelShape, s: MemorySettings, device: str) -> float:
    """Analytic bytes per token a decoder layer saves for backward (its padding-mask copy excluded)."""
    b, f = _bytes(s.base_dtype), 4
    h, nh, nkv = shape.hidden, shape.heads, shape.kv_heads
    q, kv = nh * shape.head_dim, nkv * shape.head_dim
    total = 2 * (f * h + f)                            # both RMSNorms: fp32 input copy + rsqrt
    if shape.qk_norm:
        total += f * (q + kv) + f * (nh + nkv)         # q/k RMSNorms, the same per head
    kv_sdpa = q if s.masked else kv                    # with a mask transformers repeats k, v to all heads
    total += b * (2 * q + 2 * kv_sdpa) + f * nh        # SDPA: q, k, v, output; fp32 logsumexp
    total += 3 * b * shape.intermediate                # SiLU input, its output, up_proj output (the gated mul)
    if s.lora_r == 0:
        return float(total)
    a, dims = _bytes(s.adapter_dtype), shape.linear_dims()
    source = dict(q_proj="n1", k_proj="n1", v_proj="n1", o_proj="attn", gate_proj="n2", up_proj="n2", down_proj="mid")
    shared: set[str] = set()
    for t in s.lora_targets:
        d = dims[t][0]
        if s.dropout > 0:                              # per module: dropout mask + dropped input (lora_A's)
            total += (_mask_bytes(s, device) + a) * d
        elif a != b:
            total += a * d                             # per module: its input cast to the adapter dtype
        elif source[t] not in shared:                  # the input itself, once per tensor; o_proj's is
            shared.add(source[t])                      # a view of the SDPA output, saved already
            total += 0 if source[t] == "attn" else a * d
        total += a * s.lora_r                          # lora_A output (lora_B's input)
    return float(total)


def _first_layer_discount(shape: ModelShape, s: MemorySettings, device: str) -> float:
    """What layer 0 does not save when its input needs no grad (LoRA without checkpointing)."""
    if s.lora_r == 0 or s.checkpoint_every_layers:
        return 0.0
    fed = sum(1 for t in s.lora_targets if t in ("q_proj", "k_proj", "v_proj", "gate_proj"))
    drop = _mask_bytes(s, device) * shape.hidden * fed if s.dropout > 0 else 0
    return float(4 * shape.hidden + 4 + drop)


def analytic_transient(shape: ModelShape, s: MemorySettings) -> float:
    """The fitted transient per token (with checkpointing: beyond the recomputed layer)."""
    key = (s.lora_r > 0 and s.adapter_dtype != s.base_dtype, s.lora_r > 0 and s.dropout > 0)
    (fh, fi), (ch, ci) = _TRANSIENT_FIT[key]
    h, i = shape.hidden, shape.intermediate
    fit = max(ch * h + ci * i, 0) if s.checkpoint_every_layers else max(fh * h + fi * i, _BACKWARD_TRANSIENT_H * h)
    return _bytes(s.base_dtype) / 2 * fit


def analytic_layer_bytes(shape: ModelShape, s: MemorySettings, *, tokens: int) -> float:
    """A layer's saved bytes per token at padded length ``tokens``, its padding-mask copy included."""
    return _layer_saved(shape, s, s.device) + (_bytes(s.base_dtype) * tokens if s.masked else 0.0)


def known_shape(model_id: str) -> "ModelShape | None":
    """The shape the constants file records for a hub model id (or its -Base/-Instruct-... variants)."""
    want, recorded = str(model_id).lower().rstrip("/"), load_constants().get("recorded_configs", {})
    hits = [rid for rid in recorded if want == rid.lower() or want.startswith(rid.lower() + "-")]
    return ModelShape.from_config(recorded[max(hits, key=len)]) if hits else None


@functools.lru_cache(maxsize=4)
def load_constants(path: str | Path | None = None) -> dict:
    p = Path(path) if path else CONSTANTS_PATH
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}


def _measured(shape: ModelShape, s: MemorySettings) -> tuple[dict, str] | None:
    c = load_constants()
    if not c or any((c.get("shape") or {}).get(k) != getattr(shape, k) for k in SHAPE_MATCH):
        return None
    entries = c.get("entries") or {}
    entry = entries.get(settings_key(s))
    if not entry or tuple(entry.get("lora_targets") or ()) != tuple(s.lora_targets):
        return None
    unmasked = entries.get(settings_key(replace(s, masked=False))) or {}  # the mask is in the layer figure
    ck = "checkpointed_transient_bytes_per_token"
    entry = {**entry, ck: entry.get(ck, unmasked.get(ck))}
    v = c.get("versions", {})
    return entry, (f"measured: {settings_key(s)} (torch {v.get('torch')}, transformers {v.get('transformers')}, "
                   f"peft {v.get('peft')}; {c.get('device')}, {c.get('date')})")


def per_layer_bytes_per_token(shape: ModelShape, settings: MemorySettings) -> tuple[float, str]:
    """Bytes a decoder layer saves per token without checkpointing (padding-mask copy excluded), and whence."""
    hit = _measured(shape, settings)
    if hit is None:
        return _layer_saved(shape, settings, settings.device), "analytic"
    entry, source = hit
    value = float(entry["bytes_per_token_per_layer"])
    delta = _layer_saved(shape, settings, settings.device) - _layer_saved(shape, settings, "cpu")
    if delta:
        source += f" + analytic {settings.device} dropout-mask correction ({delta:+.0f} B)"
    return value + delta, source


def transient_bytes_per_token(shape: ModelShape, settings: MemorySettings) -> tuple[float, str]:
    """The transient part per token (with checkpointing: beyond the recomputed layer), and whence."""
    name = f"{'checkpointed_' if settings.checkpoint_every_layers else ''}transient_bytes_per_token"
    hit = _measured(shape, settings)
    if hit is None or hit[0].get(name) is None:
        return analytic_transient(shape, settings), "analytic fit"
    return float(hit[0][name]), hit[1]


def _predict(shape: ModelShape, s: MemorySettings, tokens: float, length: float, read_rows: float) -> PeakPrediction:
    b, h = _bytes(s.base_dtype), shape.hidden
    per_layer, source = per_layer_bytes_per_token(shape, s)
    transient, _ = transient_bytes_per_token(shape, s)
    layer = per_layer + (b * length if s.masked else 0.0)
    ckpt = math.ceil(shape.layers / s.checkpoint_every_layers) if s.checkpoint_every_layers > 0 else 0
    saved = (shape.layers - ckpt) * layer + ckpt * b * h - _first_layer_discount(shape, s, s.device)
    saved += 4 * h + 4 + 2 * b * shape.head_dim + (length if s.masked and ckpt else 0)  # final norm, rotary, mask
    lora = shape.lora_params(s.lora_r, s.lora_targets) if s.lora_r else 0
    parts = {
        "weights": shape.base_params() * b,
        "lora_and_optimizer": lora * (16 + (4 if s.adapter_dtype != "float32" else 0)),  # + bf16 weight, grad
        "saved_activations": int(tokens * saved),
        "recompute": int(tokens * layer) if ckpt else 0,
        "transient": int(tokens * transient),
        "read_rows": int(math.ceil(read_rows * (2 * b * (h + shape.vocab) + 16))),
    }
    return PeakPrediction(total_bytes=int(sum(parts.values())), parts=parts, per_layer_bytes_per_token=per_layer,
                          source=source)


def predict_peak(shape: ModelShape, settings: MemorySettings, *, tokens: int, prompts: int,
                 read_rows: int) -> PeakPrediction:
    """Peak of one step on ``prompts`` prompts of ``tokens`` padded tokens and ``read_rows`` read rows in all."""
    if tokens < 0 or prompts < 1 or read_rows < 0:
        raise ValueError(f"need tokens >= 0, prompts >= 1, read_rows >= 0: {tokens}, {prompts}, {read_rows}")
    return _predict(shape, settings, float(tokens), tokens / prompts, float(read_rows))


def micro_batch_budget(shape: ModelShape, settings: MemorySettings, *, device_bytes: int, margin: float,
                       prompt_tokens: int, reads_per_prompt: int) -> int:
    """The largest padded-token count per micro-batch whose predicted peak is <= (1 - margin) * device_bytes.

    For prompts padded to ``prompt_tokens`` with ``reads_per_prompt`` read rows each; it may fall between
    whole prompts (``budget // prompt_tokens`` fit). 0 when even one prompt does not fit."""
    if prompt_tokens < 1 or not 0.0 <= margin < 1.0:
        raise ValueError(f"need prompt_tokens >= 1 and 0 <= margin < 1: {prompt_tokens}, {margin}")
    limit = (1.0 - float(margin)) * int(device_bytes)

    def fits(t: int) -> bool:
        return _predict(shape, settings, t, prompt_tokens, reads_per_prompt * t / prompt_tokens).total_bytes <= limit

    if not fits(prompt_tokens):
        return 0
    lo, hi = prompt_tokens, 2 * prompt_tokens
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # the peak grows with the tokens: bisect
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


__all__ = ["ModelShape", "MemorySettings", "PeakPrediction", "per_layer_bytes_per_token", "predict_peak",
           "micro_batch_budget", "transient_bytes_per_token", "analytic_layer_bytes", "analytic_transient",
           "settings_key", "load_constants", "known_shape", "CONSTANTS_PATH", "DTYPE_BYTES"]
