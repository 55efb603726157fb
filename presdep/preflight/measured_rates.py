"""The micro-jobs' figures in ``presdep plan --rates`` form.

``presdep plan`` reads rates measured on its benchmark model (:data:`presdep.report.plan_rates.
BENCHMARK_MODEL`) and moves them to each job's model by the ratio of FLOPs per token. A
preflight measures on the config's own model, so each rate is moved the other way before it is
written: read back for the same model at the same prompt length, it is the rate measured. A
training rate is stored as a checkpointed step's (the form the plan reads), so a step measured
without checkpointing is scaled by the FLOPs the recompute adds.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Sequence

from presdep.config.records import WorkflowConfig
from presdep.preflight.micro_jobs import MicroJob
from presdep.report.plan import model_shape
from presdep.report.plan_rates import BENCHMARK_MODEL, READOUT_KEYS, TRAIN_KEY
from presdep.report.plan_shapes import flops_per_token
from presdep.runtime.flops import TRAIN_FLOPS_PER_FORWARD
from presdep.training.memory_model import known_shape


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()})"


def _to_benchmark_model(rate: float, cfg: WorkflowConfig, model: str, resources: Path, length: float,
                        path: str) -> float:
    shape, _ = model_shape(cfg, model, resources)
    bench = known_shape(BENCHMARK_MODEL)
    return rate * flops_per_token(shape, length, path) / flops_per_token(bench, length, path)


def rates_of(jobs: Sequence[MicroJob], cfg: WorkflowConfig, resources: Path) -> dict:
    """The ``rates`` object of a ``--rates`` file from the micro-jobs that measured a rate."""
    rates: dict = {}
    devices = [j.device for j in jobs if j.family in ("score", "train")]
    rates["device"] = device_name(devices[0]) if devices else None
    for job in jobs:
        if job.tokens_per_s is None or not job.prompts:
            continue
        length = job.prompt_tokens / job.prompts
        if job.family == "score":
            path = job.detail["readout_path"]
            rates[READOUT_KEYS[path]] = _to_benchmark_model(job.tokens_per_s, cfg, job.detail["model"], resources,
                                                            length, path)
        elif job.family == "train":
            rate = _to_benchmark_model(job.tokens_per_s, cfg, job.detail["model"], resources, length, "slot")
            if not job.detail["checkpointing"]:
                rate *= TRAIN_FLOPS_PER_FORWARD[False] / TRAIN_FLOPS_PER_FORWARD[True]
            rates[TRAIN_KEY] = rate
    return rates


__all__ = ["device_name", "rates_of"]
