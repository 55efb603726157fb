"""A trained student read with its LoRA merged into the weights: one matmul per projection.

An unmerged ``PeftModel`` pays the adapter's two extra matmuls, a dropout and casts in every
projection of every forward; merged, each weight is W + (alpha / r) B A and the forward is the
base model's. The merge is computed in float32, into weights this student owns (a base another
reader still uses is copied first, ``shared=True``; never changed in place), then cast to the
read dtype.

When to merge (``models.<name>.merge_adapter``):

- ``auto`` (default): where the read is float32, where a merged read equals the unmerged one
  within 1e-5 of E[g] (a test); a bfloat16 read stays unmerged, so its scores are what they were.
- ``always``: also for a bfloat16 read. That changes the read by more than the last bits: the
  merged weight is rounded to bfloat16 once, where the unmerged read rounds the base and runs
  the adapter's path in bfloat16. Measured on a trained SmolLM2 student against its float32 read:
  mean |delta E[g]| 0.008 merged, 0.031 unmerged (docs/guide/speed.md#read-cache).
- ``never``: the unmerged ``PeftModel``.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, Callable

from presdep.contracts.errors import InvalidInput
from presdep.runtime.models import dtype_name

log = logging.getLogger(__name__)

MERGE_CHOICES = ("auto", "always", "never")


def merges(choice: str | None, dtype: Any) -> bool:
    """Whether a student read in ``dtype`` (a torch dtype or its name) is merged under ``choice``
    (None: the first choice, for a model entry the schema did not fill)."""
    choice = MERGE_CHOICES[0] if choice is None else choice
    if choice not in MERGE_CHOICES:
        raise InvalidInput(f"merge_adapter must be one of {MERGE_CHOICES}, got {choice!r}")
    return choice == "always" or (choice == "auto" and dtype_name(dtype) == "float32")


def merged_student(base: Any, adapter_dir: str | Path, *, shared: bool) -> Any:
    """``base`` with the PEFT LoRA adapter at ``adapter_dir`` merged in, in eval mode, in the
    base's dtype (load it in float32 for an exact merge).

    ``shared``: the base is used elsewhere, so the merge goes into a deep copy of it; else the
    caller loaded it for this student alone and it is merged in place (no second copy of the
    weights in memory)."""
    from peft import PeftModel

    target = copy.deepcopy(base) if shared else base
    model = PeftModel.from_pretrained(target, str(adapter_dir)).merge_and_unload()
    log.info("adapter %s merged into %s weights (%s)", adapter_dir, "a copy of the base's" if shared else "the base's",
             next(model.parameters()).dtype)
    return model.eval()


def unmerged_student(base: Any, adapter_dir: str | Path) -> Any:
    """``base`` wrapped with the adapter as a ``PeftModel`` (the reference the merged read is tested against)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base, str(adapter_dir)).eval()


def load_student(load_base: Callable[[Any], Any], adapter_dir: str | Path, *, choice: str | None, dtype: Any) -> Any:
    """The student to read in ``dtype``: ``load_base(load_dtype)`` gives a base of its own; merged
    in float32 and cast to ``dtype`` where :func:`merges` says so, else the unmerged PeftModel."""
    import torch

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if not merges(choice, dtype):
        return unmerged_student(load_base(dtype), adapter_dir)
    model = merged_student(load_base(torch.float32), adapter_dir, shared=False)
    return model if dtype == torch.float32 else model.to(dtype)


__all__ = ["MERGE_CHOICES", "load_student", "merged_student", "merges", "unmerged_student"]
