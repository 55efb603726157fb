"""Surviving out-of-memory errors in a training step, and the allocator setting that makes them rarer.

The micro-batch budget (:mod:`presdep.training.memory_model`) leaves ``memory_margin`` of the GPU
free at the predicted peak, but allocator fragmentation from micro-batches of varying shapes and
the CUDA context are not in the model, so a long run can still run out of memory late. A step that
does is not fatal: what the attempt held is freed (its gradients, its graph, the allocator's cached
blocks), the torch RNG goes back to where the step started, the budget is halved and the step is
cut again and re-run from its first micro-batch. The step's gradient is then the one of a run that
used the smaller budget from the start (the cut changes only how the gradient is accumulated, see
:mod:`presdep.training.micro_batches`), and the smaller budget stays for the rest of the run (a
later out-of-memory halves it again; ``train_log.parquet`` records it, so a resumed run keeps it).

Only the allocator's own error is caught (``torch.OutOfMemoryError``, the same class as
``torch.cuda.OutOfMemoryError``), never a generic ``RuntimeError``: a shape bug must fail at once.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field

import torch

from presdep.training.micro_batches import MicroBatch, StepDoesNotFit

log = logging.getLogger(__name__)

# torch.OutOfMemoryError; torch.cuda.OutOfMemoryError names the same class (CPU builds have it too).
OOM_ERRORS: tuple[type[BaseException], ...] = (torch.cuda.OutOfMemoryError,)

# Expandable segments let the caching allocator grow a segment instead of keeping blocks of every
# micro-batch shape it has seen: the fragmentation the memory model leaves out.
ALLOC_CONF = "expandable_segments:True"
# The variables torch reads its allocator settings from (PYTORCH_ALLOC_CONF first); a user's own is kept.
ALLOC_VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


def prefer_expandable_segments(env: MutableMapping[str, str] | None = None) -> bool:
    """Ask for ``expandable_segments:True`` (``PYTORCH_CUDA_ALLOC_CONF``) unless the user set another
    allocator configuration; returns whether it is asked for.

    torch reads the variable when it loads, so a job sets it before importing torch (the
    train_student script does). A process that loaded torch before (the workflow's warm worker
    forks jobs from one) is also told directly, which holds while CUDA is not initialised.
    """
    env = os.environ if env is None else env
    theirs = "PYTORCH_ALLOC_CONF" in env or env.get("PYTORCH_CUDA_ALLOC_CONF", ALLOC_CONF) != ALLOC_CONF
    if theirs:
        return False
    env["PYTORCH_CUDA_ALLOC_CONF"] = ALLOC_CONF
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is not None and torch.cuda.is_available() and not torch.cuda.is_initialized():
        setter(ALLOC_CONF)  # the same value again where torch read it on loading: no change
    return True


def free_memory(device: torch.device) -> None:
    """Give back what a failed attempt held: its tensors (unreachable once its exception is gone;
    the collector for reference cycles) and, on CUDA, the cached blocks, so the retry allocates
    from unfragmented memory."""
    gc.collect()
    if device.type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@dataclass
class StepAttempts:
    """The attempts of one training step: the RNG state they start from, the micro-batch being read
    (set by the step's loop) and the out-of-memory retries so far."""

    where: str
    device: torch.device
    sizes: Sequence[tuple[int, int]]  # per item: (prompts, longest prompt's tokens)
    reading: MicroBatch | None = None
    retries: int = 0
    _cpu_rng: torch.Tensor = field(init=False, repr=False)
    _cuda_rng: torch.Tensor | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Dropout draws from these: a retry draws what a run at the smaller budget would.
        self._cpu_rng = torch.get_rng_state()
        self._cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None

    def smaller_budget(self, limit: int | None, micro: Sequence[MicroBatch], error: BaseException) -> int:
        """The budget to retry with after ``error`` (out of memory) while reading ``micro`` under
        ``limit`` padded tokens (None: the whole step in one pass): half the budget in use.

        Raises :class:`StepDoesNotFit` from ``error`` when the micro-batch that ran out was one
        item: it cannot be cut.
        """
        failed = self.reading if self.reading is not None else micro[0]
        in_use = max(m.padded_tokens for m in micro)
        before = in_use if limit is None else min(limit, in_use)
        if len(failed.items) == 1:
            p, length = self.sizes[failed.items[0]]
            raise StepDoesNotFit(
                f"{self.where}: out of GPU memory reading one training item alone ({p} prompt(s) of {length} "
                f"tokens = {p * length} padded tokens; micro-batch budget {_named(limit)}); its views are read "
                f"together, so it cannot be cut: set gradient_checkpointing: true with checkpoint_every_layers: 1, "
                f"lora_compute_dtype: bfloat16, a smaller max_doc_chars or B, or use a larger GPU") from error
        after = max(1, before // 2)
        log.warning("%s: out of GPU memory in a micro-batch of %d items (%d padded tokens); micro-batch budget "
                    "%s -> %d padded tokens (kept for the rest of the run); the step restarts",
                    self.where, len(failed.items), failed.padded_tokens, _named(limit), after)
        return after

    def restart(self) -> None:
        """Before a retry (outside the ``except``): free the attempt's memory, rewind the RNG."""
        free_memory(self.device)
        torch.set_rng_state(self._cpu_rng)
        if self._cuda_rng is not None:
            torch.cuda.set_rng_state(self._cuda_rng, self.device)
        self.reading = None
        self.retries += 1


def _named(limit: int | None) -> str:
    return "none (the whole step in one pass)" if limit is None else f"{limit} padded tokens"


__all__ = ["ALLOC_CONF", "ALLOC_VARIABLES", "OOM_ERRORS", "StepAttempts", "free_memory", "prefer_expandable_segments"]
