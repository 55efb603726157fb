"""The records of training: a teacher entry and the settings of one student run.

:class:`Teacher` is one entry of the config's ``teachers:`` section (built by
:func:`_teacher`); :class:`TrainingSettings` the settings of one student run, read by the
training loop (:data:`STUDENT_KEYS`, defaults in the config schema only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from presdep.config.record_values import _freeze, _is_int, thaw
from presdep.config.schema_enums import entry_enum
from presdep.contracts.errors import InvalidInput

# Enums a library caller's mapping is checked against: the schema's own.
TEACHER_KINDS = entry_enum("teachers", "kind")

# Every setting the training loop reads; their defaults live in the workflow's config schema only.
# Keys of a student block that name the run's inputs or its set of runs, not how one run trains.
STUDENT_KEYS_OUTSIDE_TRAINING = ("teacher", "train", "heldout", "seeds", "lambda")
STUDENT_KEYS = ("objective", "lambda", "lambda_warmup_steps", "n_views", "view_seed_base", "steps", "batch_chunks",
                "lr", "lr_warmup_ratio", "weight_decay", "betas", "max_grad_norm", "checkpoint_every",
                "eval_batch_prompts", "debias_eps", "lora", "device", "dtype", "gradient_checkpointing",
                "checkpoint_every_layers", "micro_batch_tokens", "memory_margin", "lora_compute_dtype", "pad_mask")


@dataclass(frozen=True)
class TrainingSettings:
    """The settings of ONE student run: its variant's ``student:`` block with lambda resolved to
    one value (and the teacher, train and held-out names it was built with, in ``spec``)."""

    objective: str
    lam: float
    lambda_warmup_steps: int
    n_views: int
    view_seed_base: int
    steps: int
    batch_chunks: int
    lr: float
    lr_warmup_ratio: float
    weight_decay: float
    betas: tuple[float, float]
    max_grad_norm: float
    checkpoint_every: int
    eval_every: int
    eval_batch_prompts: int
    debias_eps: float
    lora: Mapping[str, Any]
    device: str
    dtype: str
    gradient_checkpointing: bool | str
    checkpoint_every_layers: int
    micro_batch_tokens: int | str
    memory_margin: float
    lora_compute_dtype: str
    pad_mask: bool | str
    spec: Mapping[str, Any] = field(repr=False)
    gpu_mem_gb: float | None = None

    def as_dict(self) -> dict:
        """The settings as plain data (resume fingerprints and done.json record them)."""
        return thaw(self.spec)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainingSettings:
        """From a job's params (the validated config): not checked again; ``eval_every`` defaults
        to ``checkpoint_every`` (evaluated adapters are the kept ones)."""
        spec = {**thaw(d)}
        if spec.get("eval_every") is None:
            spec["eval_every"] = spec["checkpoint_every"]
        kw = {k: spec[k] for k in STUDENT_KEYS if k != "lambda"}
        kw["betas"] = tuple(spec["betas"])
        return cls(lam=spec["lambda"], eval_every=spec["eval_every"], gpu_mem_gb=spec.get("gpu_mem_gb"),
                   spec=_freeze(spec), **kw)

    @classmethod
    def checked(cls, d: Mapping[str, Any]) -> TrainingSettings:
        """From a library caller's mapping: every key of STUDENT_KEYS, with values the schema allows."""
        missing = [k for k in STUDENT_KEYS if k not in d]
        if missing:
            raise InvalidInput(f"student settings lack {missing} (the config schema gives their defaults)")
        for key in ("steps", "batch_chunks", "checkpoint_every", "n_views"):
            if not _is_int(d[key]) or d[key] < 1:
                raise InvalidInput(f"student {key} must be a positive integer, got {d[key]!r}")
        if not 0.0 <= float(d["lr_warmup_ratio"]) <= 1.0:
            raise InvalidInput(f"student lr_warmup_ratio must be in [0, 1], got {d['lr_warmup_ratio']!r}")
        if len(d["betas"]) != 2 or not all(0.0 <= float(b) < 1.0 for b in d["betas"]):
            raise InvalidInput(f"student betas must be two numbers in [0, 1), got {d['betas']!r}")
        s = cls.from_dict(d)
        if s.eval_every % s.checkpoint_every:
            raise InvalidInput("student eval_every must be a multiple of checkpoint_every (evaluated adapters are kept)")
        return s


@dataclass(frozen=True)
class Teacher:
    name: str
    kind: str
    model: str
    T: int
    skip: str | None
    spec: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any]) -> Teacher:
        """From a validated entry (a job's params): not checked again."""
        return _teacher(name, _freeze(spec))

    @classmethod
    def checked(cls, name: str, spec: Mapping[str, Any]) -> Teacher:
        """From a library caller's mapping: a known kind and a number of shuffles T."""
        if spec.get("kind") not in TEACHER_KINDS:
            raise InvalidInput(f"teacher {name!r}: kind {spec.get('kind')!r} not in {TEACHER_KINDS}")
        if not _is_int(spec.get("T")) or spec["T"] < 1:
            raise InvalidInput(f"teacher {name!r}: 'T' (number of teacher shuffles) must be an integer >= 1, "
                               f"got {spec.get('T')!r}")
        return cls.from_spec(name, {"model": None, **spec})

    @property
    def open_weight(self) -> bool:
        return self.kind == "open_weight"

    @property
    def on_gpu(self) -> bool:
        return self.open_weight and self.spec.get("device") == "cuda"

    def as_dict(self) -> dict:
        return thaw(self.spec)


def _teacher(name: str, t: Mapping[str, Any]) -> Teacher:
    return Teacher(name=name, kind=t["kind"], model=t["model"], T=t["T"], skip=t.get("skip"), spec=t)


__all__ = ["STUDENT_KEYS", "STUDENT_KEYS_OUTSIDE_TRAINING", "TEACHER_KINDS", "Teacher", "TrainingSettings"]
