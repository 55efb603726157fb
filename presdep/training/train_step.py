"""One optimiser step of a student run, and the state it works on.

The step reads its ``batch_chunks`` training items in micro-batches
(:mod:`presdep.training.micro_batches`) and accumulates their gradients: each
micro-batch's loss divides by the whole step's denominators, so the step's gradient
is the unsplit one's (to float rounding). LoRA matmuls run in bfloat16 by autocast
when the settings ask (master weights and AdamW state stay float32); the padding mask
is passed or not as :func:`pad_mask_on` says. A step that runs out of GPU memory is cut
again with half the budget and re-run from its start (:mod:`presdep.training.oom`).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl
import torch

from presdep.config.records import TrainingSettings
from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import random_shuffle, stable_seed
from presdep.training.micro_batches import (
    StepDoesNotFit,
    budget_in_force,
    cut_micro_batches,
    token_budget,
)
from presdep.training.objectives import Objective, QueryList, TrainItem
from presdep.training.oom import OOM_ERRORS, StepAttempts
from presdep.training.readout_grad import GradReadout, ReadoutScorer


def epoch_order(seed: int, epoch: int, n_chunks: int) -> list[int]:
    """The item order of ``epoch``: a stable shuffle keyed by (seed, epoch)."""
    return random_shuffle(list(range(n_chunks)), stable_seed(int(seed), "epoch", int(epoch)))


def batch_for_step(seed: int, step: int, batch_chunks: int, n_items: int) -> list[tuple[int, int]]:
    """(epoch, item index) pairs of 0-based ``step``: a stream of epoch permutations."""
    out = []
    for k in range(step * batch_chunks, (step + 1) * batch_chunks):
        epoch, i = divmod(k, n_items)
        out.append((epoch, epoch_order(seed, epoch, n_items)[i]))
    return out


def lr_at(step: int, lr: float, warmup: int) -> float:
    """The learning rate of 0-based ``step``: linear warm-up over ``warmup`` steps, then constant."""
    return lr * min(1.0, (step + 1) / warmup) if warmup > 0 else lr


@dataclass
class EpochItems:
    """The objective's training items, one epoch held at a time (a step spans at most two)."""

    objective: Objective
    queries: list[QueryList]
    cache: dict[int, list[TrainItem]] = field(default_factory=dict)

    def __call__(self, epoch: int) -> list[TrainItem]:
        if epoch not in self.cache:
            self.cache.clear()
            self.cache[epoch] = self.objective.items(self.queries, epoch)
        return self.cache[epoch]


@dataclass
class TrainState:
    """One run: its settings, data and objective, the LoRA model and optimiser, and its progress."""

    s: TrainingSettings
    out_dir: Path
    B: int
    seed: int
    max_doc_chars: int | None
    device: torch.device
    queries: list[QueryList]
    objective: Objective
    view_seeds: list[int]
    n_labelled: int
    items_of: EpochItems
    n_items: int
    model: Any  # the base model wrapped with LoRA adapters (peft)
    readout: GradReadout
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    warmup: int
    checkpointing: bool
    masked: bool
    rows: list[dict] = field(default_factory=list)
    heldout_rows: list[dict] = field(default_factory=list)
    start: int = 0
    resumed: bool = False
    # The micro-batch budget out-of-memory retries lowered the run to (None: none yet); it only falls.
    oom_budget: int | None = None


@dataclass
class HeldOut:
    """The held-out split and the scorer that evaluates the student on it."""

    scorer: ReadoutScorer
    candidates: pl.DataFrame
    qrels: pl.DataFrame


def _step_batch(run: TrainState, picks: Sequence[tuple[int, int]]) -> list[TrainItem]:
    """The training items of a step's (epoch, item index) picks."""
    batch = []
    for e, i in picks:
        its = run.items_of(e)
        if len(its) != run.n_items:
            raise RuntimeError(f"epoch {e} has {len(its)} training items, epoch 0 had {run.n_items}")
        batch.append(its[i])
    return batch


def _compute_context(run: TrainState) -> Any:
    """bfloat16 LoRA matmuls by autocast (master weights and AdamW state stay float32), or nothing."""
    if run.s.lora_compute_dtype == "bfloat16":
        return torch.autocast(device_type=run.device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _step_budget(run: TrainState, built: Sequence[Sequence[Any]], step: int) -> int | None:
    """The step's micro-batch budget in padded tokens (None: the whole step in one pass)."""
    if run.s.micro_batch_tokens == "auto" and run.device.type != "cuda":
        return None  # the CPU default: one pass, nothing to ask the memory model
    longest = max(len(b.ids) for views in built for b in views)
    device_bytes = None
    if run.device.type == "cuda" and run.s.micro_batch_tokens == "auto" and run.s.gpu_mem_gb is None:
        device_bytes = int(torch.cuda.mem_get_info(run.device)[1])
    base_dtype = str(next(run.model.parameters()).dtype).replace("torch.", "")
    return token_budget(run.s, model_config=_causal_config(run.model), device_type=run.device.type,
                        device_bytes=device_bytes, checkpointing=run.checkpointing, masked=run.masked,
                        base_dtype=base_dtype, longest_prompt=longest, reads_per_prompt=run.B,
                        where=f"train_student {run.out_dir} step {step + 1}")


def _causal_config(model: Any) -> dict:
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return lm.config.to_dict()


def _accepts_norms(objective: Objective) -> bool:
    return "norms" in inspect.signature(objective.loss).parameters


def train_step(run: TrainState, step: int) -> tuple[dict, float]:
    """One optimiser step (0-based ``step``), its gradient accumulated over micro-batches; returns its
    train-log row (held-out columns empty) and its loss.

    An out-of-memory error restarts the step with half the budget (``run.oom_budget``, kept for
    the rest of the run): the gradient is then a clean run's at that budget (see
    :mod:`presdep.training.oom`); the row counts the retries (``oom_retries``)."""
    s = run.s
    t0 = time.perf_counter()
    for g in run.optimizer.param_groups:
        g["lr"] = lr_at(step, float(s.lr), run.warmup)
    picks = batch_for_step(run.seed, step, s.batch_chunks, run.n_items)
    batch = _step_batch(run, picks)
    built = [run.readout.build([(run.queries[it.query].query, [run.queries[it.query].docs[i] for i in view])
                                for view in it.views]) for it in batch]
    sizes = [(len(v), max(len(b.ids) for b in v)) for v in built]
    where = f"train_student {run.out_dir} step {step + 1}"
    budget = _step_budget(run, built, step)
    attempts = StepAttempts(where, run.device, sizes)
    while True:
        try:
            micro = cut_micro_batches(sizes, budget, run.oom_budget)
        except StepDoesNotFit as exc:
            raise StepDoesNotFit(f"{where}: {exc}") from None
        try:
            parts = _accumulate(run, step, batch, built, micro, attempts)
            break
        except OOM_ERRORS as exc:
            new_budget = attempts.smaller_budget(budget_in_force(budget, run.oom_budget), micro, exc)
        # Outside the except: the error's traceback (and the attempt's tensors it holds) is gone.
        run.optimizer.zero_grad(set_to_none=True)
        run.oom_budget = new_budget
        attempts.restart()
    gnorm = torch.nn.utils.clip_grad_norm_(run.params, float(s.max_grad_norm))
    run.optimizer.step()
    row = {
        "step": step + 1, "epoch": picks[0][0], "loss": parts["loss"], "supervised": parts["supervised"],
        "consistency": parts.get("consistency"), "lambda": parts.get("lambda"),
        "lr": run.optimizer.param_groups[0]["lr"], "grad_norm": float(gnorm),
        "tokens": sum(len(b.ids) for v in built for b in v), "padded_tokens": sum(m.padded_tokens for m in micro),
        "micro_batches": len(micro), "seconds": time.perf_counter() - t0,
        "oom_retries": attempts.retries, "oom_budget": run.oom_budget,
        "heldout_ndcg10": None, "heldout_score_std": None,
    }
    return row, parts["loss"]


def _accumulate(run: TrainState, step: int, batch: Sequence[TrainItem], built: Sequence[Sequence[Any]],
                micro: Sequence[Any], attempts: StepAttempts) -> dict[str, Any]:
    """The step's gradient, accumulated over ``micro`` from zero; returns the step's loss terms."""
    if len(micro) > 1 and not _accepts_norms(run.objective):
        raise InvalidInput(f"objective {run.objective.name!r}: its loss takes no step normalizers (norms=), so its "
                           f"steps cannot be split into {len(micro)} micro-batches; set micro_batch_tokens higher")
    norms = run.objective.normalizers(run.queries, batch) if len(micro) > 1 else None
    run.optimizer.zero_grad(set_to_none=True)
    parts: dict[str, Any] = {}
    for mb in micro:
        attempts.reading = mb
        items = [batch[i] for i in mb.items]
        with _compute_context(run):
            flat = run.readout.expected_from_built([b for i in mb.items for b in built[i]], masked=run.masked)
        scores, k = [], 0
        for it in items:
            scores.append(flat[k : k + len(it.views)])
            k += len(it.views)
        if norms is None:  # one pass: the objective's own call, as an unsplit step
            loss, mb_parts = run.objective.loss(run.queries, items, scores, step)
        else:
            loss, mb_parts = run.objective.loss(run.queries, items, scores, step, norms=norms)
        loss.backward()
        _add_parts(parts, mb_parts)
    return parts


def _add_parts(total: dict[str, Any], parts: Mapping[str, Any]) -> None:
    """Sum a micro-batch's loss terms into the step's (each is a share of the step's total);
    lambda is the step's, not a share."""
    for k, v in parts.items():
        if k == "lambda" or v is None:
            total[k] = v
        else:
            total[k] = total.get(k, 0.0) + float(v)


__all__ = ["EpochItems", "TrainState", "HeldOut", "epoch_order", "batch_for_step", "lr_at", "train_step"]
