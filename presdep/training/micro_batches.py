"""Gradient accumulation inside a step: a step's training items cut into micro-batches.

A step of ``batch_chunks`` items (each item one prompt per view: OC-SFT's two views of a
chunk, one view otherwise) is read in micro-batches whose padded tokens (prompts x the
longest prompt) stay within a budget. Items are sorted by their longest prompt first, so
a micro-batch pads little (on random DL19 chunks: about 19% of a step's tokens are pads
in one unsorted batch of 32, about 2% in sorted micro-batches of 4). An item is never
split: the views a loss term couples are read in one forward. Each micro-batch's loss
divides by the whole step's denominators (:meth:`Objective.normalizers`), so the
accumulated gradient is the unsplit step's.

The budget: ``micro_batch_tokens`` when the settings give a number; on CUDA with
``auto``, the largest the memory model (:mod:`presdep.training.memory_model`) fits in
the GPU's memory (``gpu_mem_gb``, else ``torch.cuda.mem_get_info``) less
``memory_margin``; elsewhere none (the whole step in one pass, in item order: the CPU
default reads exactly as before). After an out-of-memory error the run's budget is at most
half the one that ran out (:mod:`presdep.training.oom`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from presdep.contracts.errors import InvalidInput
from presdep.training.memory_model import MemorySettings, ModelShape, micro_batch_budget, predict_peak

GIB = 2**30


class StepDoesNotFit(InvalidInput):
    """One training item of a step needs more memory than the device has."""


@dataclass(frozen=True)
class MicroBatch:
    """Indices into the step's items, read in one forward and backward."""

    items: tuple[int, ...]
    prompts: int
    padded_tokens: int


def cut_micro_batches(sizes: Sequence[tuple[int, int]], budget: int | None,
                      cap: int | None = None) -> list[MicroBatch]:
    """Micro-batches of items with ``sizes[i] = (prompts, longest prompt's tokens)``.

    ``budget`` and ``cap`` None: one micro-batch of every item in order. Otherwise items
    sorted by length (ties by index), each micro-batch the longest run whose padded tokens
    fit the smaller of the two. An item that alone exceeds ``budget`` raises
    :class:`StepDoesNotFit` (the caller names the job); ``cap`` is the budget an
    out-of-memory retry lowered the run to (:mod:`presdep.training.oom`), and an item
    above it is read alone rather than refused (it may fit where it shared memory before).
    """
    n = len(sizes)
    limit = budget_in_force(budget, cap)
    if limit is None:
        longest = max((length for _, length in sizes), default=0)
        prompts = sum(p for p, _ in sizes)
        return [MicroBatch(tuple(range(n)), prompts, prompts * longest)]
    order = sorted(range(n), key=lambda i: (sizes[i][1], i))
    out: list[MicroBatch] = []
    cur: list[int] = []
    prompts = 0
    for i in order:
        p, length = sizes[i]
        if budget is not None and p * length > budget:
            raise StepDoesNotFit(f"one training item ({p} prompt(s) of {length} tokens = {p * length} padded "
                                 f"tokens) exceeds the micro-batch budget of {budget} tokens; its views must be "
                                 f"read together: raise micro_batch_tokens (auto: the memory model's budget on "
                                 f"CUDA; presdep plan shows it) or shorten the prompts (max_doc_chars, B)")
        # Sorted ascending: this item's length is the micro-batch's new longest prompt (and an
        # item above the cap closes the run before it and the one after it: it goes alone).
        if cur and (prompts + p) * length > limit:
            out.append(_closed(cur, prompts, sizes))
            cur, prompts = [], 0
        cur.append(i)
        prompts += p
    if cur:
        out.append(_closed(cur, prompts, sizes))
    return out


def budget_in_force(budget: int | None, cap: int | None) -> int | None:
    """The padded tokens a micro-batch may hold: the smaller of ``budget`` and ``cap`` (None: no limit)."""
    if budget is None or cap is None:
        return cap if budget is None else budget
    return min(budget, cap)


def _closed(items: list[int], prompts: int, sizes: Sequence[tuple[int, int]]) -> MicroBatch:
    return MicroBatch(tuple(items), prompts, prompts * max(sizes[i][1] for i in items))


def checkpointing_on(s: Any, device_type: str) -> bool:
    """Gradient checkpointing: as set, or (auto) on CUDA."""
    return s.gradient_checkpointing is True or (s.gradient_checkpointing == "auto" and device_type == "cuda")


def pad_mask_on(s: Any, device_type: str) -> bool:
    """The padding mask in training reads: as set, or (auto) off on CUDA (SDPA's causal flash path), on
    elsewhere (the CPU default reads exactly as before)."""
    return s.pad_mask is True or (s.pad_mask == "auto" and device_type != "cuda")


def memory_settings(s: Any, *, checkpointing: bool, masked: bool, base_dtype: str) -> Any:
    """The memory model's settings of a student's training settings ``s``."""
    lora = dict(s.lora)
    return MemorySettings(lora_r=int(lora["r"]), lora_targets=tuple(lora["target_modules"]),
                          adapter_dtype=str(s.lora_compute_dtype), dropout=float(lora["dropout"]),
                          checkpoint_every_layers=int(s.checkpoint_every_layers) if checkpointing else 0,
                          base_dtype=base_dtype, masked=bool(masked))


def token_budget(s: Any, *, model_config: Any, device_type: str, device_bytes: int | None, checkpointing: bool,
                 masked: bool, base_dtype: str, longest_prompt: int, reads_per_prompt: int,
                 where: str) -> int | None:
    """The padded-token budget of one micro-batch (None = the whole step at once).

    ``device_bytes``: the GPU's memory when the caller asked the device (None: ``gpu_mem_gb``).
    Raises :class:`StepDoesNotFit`, naming ``where``, the prediction and what to change, when
    not even one prompt fits.
    """
    if s.micro_batch_tokens != "auto":
        return int(s.micro_batch_tokens)
    if device_type != "cuda":
        return None
    total = int(float(s.gpu_mem_gb) * GIB) if s.gpu_mem_gb is not None else device_bytes
    if total is None:
        raise InvalidInput(f"{where}: micro_batch_tokens: auto needs the GPU's memory: set gpu_mem_gb")
    shape = ModelShape.from_config(model_config)
    ms = memory_settings(s, checkpointing=checkpointing, masked=masked, base_dtype=base_dtype)
    budget = micro_batch_budget(shape, ms, device_bytes=total, margin=float(s.memory_margin),
                                prompt_tokens=int(longest_prompt), reads_per_prompt=int(reads_per_prompt))
    if budget < longest_prompt:
        one = predict_peak(shape, ms, tokens=int(longest_prompt), prompts=1, read_rows=int(reads_per_prompt))
        raise StepDoesNotFit(
            f"{where}: one prompt of {longest_prompt} tokens is predicted to need {one.gib:.1f} GiB, more than "
            f"{(1 - float(s.memory_margin)) * total / GIB:.1f} GiB ({total / GIB:.1f} GiB less memory_margin "
            f"{float(s.memory_margin):g}); set gradient_checkpointing: true with checkpoint_every_layers: 1, "
            f"lora_compute_dtype: bfloat16, a smaller max_doc_chars or B, or use a larger GPU")
    return budget


__all__ = ["GIB", "MicroBatch", "StepDoesNotFit", "budget_in_force", "checkpointing_on", "pad_mask_on",
           "cut_micro_batches", "memory_settings", "token_budget"]
