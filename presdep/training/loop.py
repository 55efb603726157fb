"""LoRA training of a student scorer on silver labels, with checkpoints and resume.

Layout of one run (``out_dir`` = ``results/models/<student>/seed<seed>/``)::

    checkpoints/step000010/adapter/      peft adapter at that step (kept for selection)
    checkpoints/step000010/trainer.pt    optimizer + RNG state + step (latest checkpoint only)
    checkpoints/step000010/log.json      train-log rows up to that step
    adapter/                             the final adapter
    train_log.parquet                    step, loss terms, lr, tokens, out-of-memory retries, held-out nDCG@10
                                         and score spread (eval steps)
    heldout.parquet                      step, query_id, ndcg10 (per query, at eval steps)
    done.json                            settings, view seeds, held-out figures, checkpoints; written last,
                                         with a digest (presdep.contracts.json_artifacts)

Everything a step does derives from (seed, step): the item order of an epoch
is a stable shuffle, the views are stable shuffles of the seed's view seeds, dropout draws from the torch
RNG whose state is checkpointed. So a run killed at any point and resumed from
its last checkpoint ends with the same adapter as an uninterrupted run (on the
same device and software).

``train_student`` runs its steps in order: set-up (``_set_up``), resume (``_resume``),
the step loop (``_run_steps``: :func:`presdep.training.train_step.train_step`, its gradient
accumulated over micro-batches, ``_evaluate_heldout``, checkpoints from
presdep.training.checkpoints), then the outputs (``_write_outputs``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import polars as pl
import torch
from tqdm.auto import tqdm

from presdep import __version__
from presdep.config.records import STUDENT_KEYS, Protocol, TrainingSettings, thaw
from presdep.contracts.errors import InvalidInput
from presdep.contracts.json_artifacts import write_json_artifact
from presdep.contracts.presentations import chunk_positions, stable_seed
from presdep.contracts.schemas import atomic_write, read_metadata, read_table, write_dir_atomic
from presdep.metrics.quality import ndcg_runs, qrels_to_dict
from presdep.runtime.models import load_model
from presdep.runtime.resume import resume_dir
from presdep.training.checkpoints import (
    latest_checkpoint,
    restore_checkpoint,
    run_fingerprint,
    write_checkpoint,
)
from presdep.training.lora import add_lora, enable_checkpointing, save_adapter
from presdep.training.micro_batches import checkpointing_on, pad_mask_on
from presdep.training.objectives import (
    VIEW_SEED_RULE,
    Objective,
    QueryList,
    build_queries,
    make_objective,
    slot_propensity_weights,
    view_seeds_for,
)
from presdep.training.oom import prefer_expandable_segments
from presdep.training.readout_grad import GradReadout, ReadoutScorer
from presdep.training.train_step import (
    EpochItems,
    HeldOut,
    TrainState,
    batch_for_step,
    epoch_order,
    train_step,
)

log = logging.getLogger(__name__)

# oom_retries: the step's restarts after running out of GPU memory; oom_budget: the micro-batch budget
# (padded tokens) they lowered the run to, null before any (presdep.training.oom).
LOG_COLUMNS = ("step", "epoch", "loss", "supervised", "consistency", "lambda", "lr", "grad_norm", "tokens",
               "padded_tokens", "micro_batches", "seconds", "oom_retries", "oom_budget", "heldout_ndcg10",
               "heldout_score_std")
_INT_COLUMNS = ("step", "epoch", "tokens", "padded_tokens", "micro_batches", "oom_retries", "oom_budget")


# ----------------------------------------------------------------- data


def silver_label_maps(silver: pl.DataFrame) -> tuple[dict, dict]:
    """(k1 labels, k10 labels) keyed by (query_id, doc_id): the silver table's ``label_k1``
    (the teacher's score under shuffle 0) and ``label`` (the mean over its T shuffles)
    columns, repeated on a document's rows. Missing or failed values are None."""
    for col in ("label_k1", "label"):
        if col not in silver.columns:
            raise InvalidInput(f"silver labels lack the column {col!r}; have {silver.columns}")
    k1: dict[tuple[str, str], float | None] = {}
    k10: dict[tuple[str, str], float | None] = {}
    for q, d, a, m in silver.select("query_id", "doc_id", "label_k1", "label").unique(
            ["query_id", "doc_id"], keep="first", maintain_order=True).iter_rows():
        key = (str(q), str(d))
        k1[key] = None if a is None or math.isnan(a) else float(a)
        k10[key] = None if m is None or math.isnan(m) else float(m)
    return k1, k10


def heldout_eval(
    scorer: Any, candidates: pl.DataFrame, qrels: pl.DataFrame, B: int, k: int = 10
) -> tuple[dict[str, float], float]:
    """(per-query nDCG@k, standard deviation of all scores) of the first-stage pass (contiguous chunks).

    The score spread is what the lambda rule's collapse floor reads: a student that
    gives every document nearly the same score is trivially order-stable.
    """
    layout, prompts = [], []
    for (qid,), g in candidates.sort("query_id", "first_stage_rank").group_by("query_id", maintain_order=True):
        ids, docs, query = g["doc_id"].to_list(), g["doc"].to_list(), g["query"][0]
        for pos in chunk_positions(len(ids), B, "contiguous"):
            layout.append((str(qid), [ids[i] for i in pos]))
            prompts.append((query, [docs[i] for i in pos]))
    readouts = scorer.score_prompts(prompts)
    runs: dict[str, dict[str, float]] = {}
    for (qid, ids), ro in zip(layout, readouts):
        runs.setdefault(qid, {}).update({d: r.score for d, r in zip(ids, ro)})
    spread = float(np.std([v for r in runs.values() for v in r.values()]))
    return ndcg_runs(runs, qrels_to_dict(qrels), k), spread


def lr_warmup_steps(steps: int, ratio: float) -> int:
    """Warm-up length from the ratio (ceil, so any positive ratio warms up at least one step)."""
    return int(math.ceil(float(ratio) * int(steps)))


def build_objective(s: TrainingSettings, *, B: int, seed: int, queries: Sequence[QueryList],
                    train_qrels: pl.DataFrame | None) -> tuple[Objective, list[int]]:
    """The objective of settings ``s`` for training seed ``seed`` and its view seeds."""
    view_seeds = view_seeds_for(int(seed), int(s.n_views), int(s.view_seed_base))
    slot_w = None
    if s.objective == "debias_first":
        if train_qrels is None:
            raise InvalidInput("debias_first needs the training split's qrels (slot propensities)")
        rel = {(str(q), str(d)) for q, d, r in train_qrels.select("query_id", "doc_id", "relevance").iter_rows()
               if r is not None and r >= 1}
        flags = [[(q.query_id, q.doc_ids[i]) in rel for i in pos]
                 for q in queries for pos in chunk_positions(len(q), B, "contiguous")]
        slot_w = slot_propensity_weights(flags, B, float(s.debias_eps))
    obj = make_objective(s.objective, B=B, view_seeds=view_seeds, lam=float(s.lam),
                         lambda_warmup_steps=int(s.lambda_warmup_steps), slot_weights=slot_w)
    return obj, view_seeds


# ----------------------------------------------------------------- training


def _training_data(s: TrainingSettings, *, B: int, seed: int, silver: pl.DataFrame, train_candidates: pl.DataFrame,
                   train_qrels: pl.DataFrame | None,
                   objective: Objective | None) -> tuple[list[QueryList], Objective, list[int], int]:
    """The training queries, the objective (given, or the settings'), its view seeds and the labelled-doc count."""
    k1, k10 = silver_label_maps(silver)
    queries = build_queries(train_candidates.to_dicts(), k1, k10)
    if not queries:
        raise InvalidInput("no training queries: the training candidates are empty")
    built_obj, view_seeds = build_objective(s, B=B, seed=seed, queries=queries, train_qrels=train_qrels)
    objective = objective or built_obj
    n_labelled = sum(int(objective.labels(q)[1].sum()) for q in queries)
    if n_labelled == 0:
        raise InvalidInput(f"no training document carries a {objective.label!r} silver label")
    return queries, objective, view_seeds, n_labelled


def _lora_model(model: Any, tokenizer: Any, s: TrainingSettings, *, seed: int, max_doc_chars: int | None,
                device: torch.device) -> tuple[Any, GradReadout, list[torch.nn.Parameter], torch.optim.Optimizer]:
    """The base model wrapped with fresh LoRA adapters, its gradient readout, trainable parameters and AdamW."""
    if checkpointing_on(s, device.type):
        enable_checkpointing(model, s.checkpoint_every_layers)
    model.config.use_cache = False
    peft_model = add_lora(model, thaw(s.lora), seed)
    readout = GradReadout(peft_model, tokenizer, max_doc_chars=max_doc_chars)
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=float(s.lr), weight_decay=float(s.weight_decay),
                                  betas=(float(s.betas[0]), float(s.betas[1])))
    return peft_model, readout, params, optimizer


def _set_up(model: Any, tokenizer: Any, *, student: TrainingSettings, out_dir: str | os.PathLike, B: int, seed: int,
            max_doc_chars: int | None, silver: pl.DataFrame, train_candidates: pl.DataFrame,
            train_qrels: pl.DataFrame | None, objective: Objective | None) -> TrainState:
    """Set-up: settings, output folder, data and objective, epoch items, LoRA model and optimiser."""
    s = student  # the record: validated once, when it was built
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device
    queries, objective, view_seeds, n_labelled = _training_data(
        s, B=B, seed=seed, silver=silver, train_candidates=train_candidates, train_qrels=train_qrels,
        objective=objective)
    items_of = EpochItems(objective, queries)
    n_items = len(items_of(0))
    peft_model, readout, params, optimizer = _lora_model(model, tokenizer, s, seed=seed, max_doc_chars=max_doc_chars,
                                                         device=device)
    return TrainState(s=s, out_dir=out_dir, B=B, seed=seed, max_doc_chars=max_doc_chars, device=device,
                      queries=queries, objective=objective, view_seeds=view_seeds, n_labelled=n_labelled,
                      items_of=items_of, n_items=n_items, model=peft_model, readout=readout, params=params,
                      optimizer=optimizer, warmup=lr_warmup_steps(s.steps, s.lr_warmup_ratio),
                      checkpointing=checkpointing_on(s, device.type), masked=pad_mask_on(s, device.type))


def _resume(run: TrainState, frames: Sequence[pl.DataFrame | None]) -> None:
    """Resume: drop checkpoints of other settings or data, restore the newest one, else seed the torch RNG."""
    fingerprint = run_fingerprint({**run.s.as_dict(), "objective_spec": run.objective.describe()}, run.B, run.seed,
                                  run.max_doc_chars, *frames)
    resume_dir(run.out_dir / "checkpoints", fingerprint)
    ckpt = latest_checkpoint(run.out_dir)
    if ckpt is None:
        torch.manual_seed(stable_seed(int(run.seed), "train-rng") % (2**63))
        return
    run.rows, run.heldout_rows, run.start = restore_checkpoint(ckpt, run.model, run.optimizer)
    run.resumed = True
    # The budget out-of-memory retries lowered the run to stays lowered: the resumed steps cut as the
    # uninterrupted run's did.
    run.oom_budget = run.rows[-1].get("oom_budget") if run.rows else None
    log.info("resuming from %s (step %d of %d)", ckpt, run.start, run.s.steps)


def _heldout(run: TrainState, tokenizer: Any, candidates: pl.DataFrame | None,
             qrels: pl.DataFrame | None) -> HeldOut | None:
    """The held-out split with its evaluation scorer, or None when the split is not given."""
    if candidates is None or qrels is None:
        return None
    scorer = ReadoutScorer(run.model, tokenizer, name="student", max_doc_chars=run.max_doc_chars,
                           batch_prompts=int(run.s.eval_batch_prompts), masked=run.masked)
    return HeldOut(scorer, candidates, qrels)


def _evaluate_heldout(run: TrainState, heldout: HeldOut, row: dict) -> None:
    """Held-out evaluation after a step: its mean nDCG@10 and score spread into ``row``, per-query rows kept."""
    per_q, spread = heldout_eval(heldout.scorer, heldout.candidates, heldout.qrels, run.B)
    row["heldout_ndcg10"] = float(np.mean(list(per_q.values()))) if per_q else None
    row["heldout_score_std"] = spread
    run.heldout_rows += [{"step": row["step"], "query_id": q, "ndcg10": v} for q, v in sorted(per_q.items())]
    run.model.train()


def _run_steps(run: TrainState, heldout: HeldOut | None, on_step: Callable[[int], None] | None) -> float:
    """The step loop from the resumed step to the last (evaluate, checkpoint when due); returns its wall seconds."""
    s = run.s
    t_start = time.perf_counter()
    run.model.train()
    with tqdm(total=s.steps, initial=run.start, desc=f"train {s.objective} seed{run.seed}", unit="step") as bar:
        for step in range(run.start, s.steps):
            row, loss = train_step(run, step)
            done_steps = step + 1
            last = done_steps == s.steps
            if heldout is not None and (done_steps % s.eval_every == 0 or last):
                _evaluate_heldout(run, heldout, row)
            run.rows.append(row)
            if done_steps % s.checkpoint_every == 0 or last:
                write_checkpoint(run.out_dir, done_steps, run.model, run.optimizer, run.rows, run.heldout_rows)
            bar.set_postfix(loss=f"{loss:.4f}")
            bar.update(1)
            if on_step is not None:
                on_step(done_steps)
    return time.perf_counter() - t_start


def _view_seed_rule(run: TrainState) -> str:
    """How the run's view seeds follow from its seed, with the settings' N and base."""
    return f"{VIEW_SEED_RULE} (N = {run.s.n_views}, base = {run.s.view_seed_base})"


def _write_logs(run: TrainState) -> None:
    """train_log.parquet (its metadata: seed, view seeds, objective) and heldout.parquet."""
    schema = {c: (pl.Int64 if c in _INT_COLUMNS else pl.Float64) for c in LOG_COLUMNS}
    log_df = pl.DataFrame([{c: r.get(c) for c in LOG_COLUMNS} for r in run.rows], schema=schema)
    # The log carries its run's view seeds, so a log read alone says which views trained it.
    log_meta = {"seed": str(int(run.seed)), "view_seeds": json.dumps(run.view_seeds), "objective": run.s.objective,
                "view_seed_rule": _view_seed_rule(run)}
    _write_parquet_atomic(log_df, run.out_dir / "train_log.parquet", log_meta)
    _write_parquet_atomic(
        pl.DataFrame(run.heldout_rows, schema={"step": pl.Int64, "query_id": pl.String, "ndcg10": pl.Float64}),
        run.out_dir / "heldout.parquet",
    )


def _done_record(run: TrainState, base_model: Any, wall: float, provenance: Mapping[str, Any] | None) -> dict:
    """The contents of done.json: settings, view seeds, data sizes, checkpoints, timings, held-out figures."""
    s, rows = run.s, run.rows
    checkpoints = sorted(int(p.name[4:]) for p in (run.out_dir / "checkpoints").glob("step*")
                         if (p / "adapter").is_dir())
    timed = [r["seconds"] for r in rows[run.start:]]
    return {
        "presdep_version": __version__,
        "seed": int(run.seed),
        "view_seeds": run.view_seeds,
        "view_seed_rule": _view_seed_rule(run),
        "student": s.as_dict(),
        "objective": run.objective.describe(),
        "B": int(run.B),
        "max_doc_chars": run.max_doc_chars,
        "template_sha256": run.readout.template_sha256,
        "n_queries": len(run.queries),
        "items_per_epoch": run.n_items,
        "n_labelled_docs": run.n_labelled,
        "steps": s.steps,
        "lr_warmup_steps": run.warmup,
        "resumed_from_step": run.start if run.resumed else None,
        "checkpoints": checkpoints,
        "adapter": "adapter",
        "device": run.device.type,
        "dtype": str(next(base_model.parameters()).dtype).replace("torch.", ""),
        "wall_seconds_this_run": wall,
        "seconds_per_step": float(np.mean(timed)) if timed else None,
        "heldout": {str(r["step"]): r["heldout_ndcg10"] for r in rows if r.get("heldout_ndcg10") is not None},
        "heldout_score_std": {str(r["step"]): r["heldout_score_std"] for r in rows
                              if r.get("heldout_score_std") is not None},
        "provenance": dict(provenance or {}),
    }


def _write_outputs(run: TrainState, base_model: Any, wall: float, provenance: Mapping[str, Any] | None) -> dict:
    """Final outputs: the adapter, the logs, then done.json (written last: the run is complete); returns done."""
    write_dir_atomic(run.out_dir / "adapter", lambda tmp: save_adapter(run.model, tmp))
    _write_logs(run)
    done = _done_record(run, base_model, wall, provenance)
    # With its digest: select_lambda verifies it (presdep.contracts.json_artifacts).
    write_json_artifact(run.out_dir / "done.json", done, default=str)
    return done


def train_student(
    model: Any,
    tokenizer: Any,
    *,
    silver: pl.DataFrame,
    train_candidates: pl.DataFrame,
    out_dir: str | os.PathLike,
    student: TrainingSettings,
    B: int,
    seed: int,
    max_doc_chars: int | None = None,
    train_qrels: pl.DataFrame | None = None,
    heldout_candidates: pl.DataFrame | None = None,
    heldout_qrels: pl.DataFrame | None = None,
    provenance: Mapping[str, Any] | None = None,
    on_step: Callable[[int], None] | None = None,
    objective: Objective | None = None,
) -> dict:
    """Train LoRA adapters on ``model`` (moved to the device already) and write ``out_dir``.

    Resumes from the newest checkpoint under ``out_dir`` if there is one. Returns
    the contents of ``done.json``. ``on_step(step)`` is called after each step
    (and its checkpoint) completes. ``objective`` replaces the one the settings name
    (an extension point: the settings still key the checkpoints).
    """
    run = _set_up(model, tokenizer, student=student, out_dir=out_dir, B=B, seed=seed, max_doc_chars=max_doc_chars,
                  silver=silver, train_candidates=train_candidates, train_qrels=train_qrels, objective=objective)
    _resume(run, (silver, train_candidates, train_qrels, heldout_candidates, heldout_qrels))
    heldout = _heldout(run, tokenizer, heldout_candidates, heldout_qrels)
    wall = _run_steps(run, heldout, on_step)
    return _write_outputs(run, model, wall, provenance)


def _write_parquet_atomic(df: pl.DataFrame, path: Path, metadata: Mapping[str, str] | None = None) -> None:
    """Write ``df`` (with key-value ``metadata``) as Parquet, atomically."""
    atomic_write(path, lambda tmp: df.write_parquet(tmp, metadata=dict(metadata) if metadata else None))


def train_student_files(
    *,
    model_dir: str | os.PathLike,
    silver_path: str | os.PathLike,
    train_candidates_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    student: TrainingSettings,
    protocol: Protocol,
    seed: int,
    train_qrels_path: str | os.PathLike | None = None,
    heldout_candidates_path: str | os.PathLike | None = None,
    heldout_qrels_path: str | os.PathLike | None = None,
    threads: int | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> dict:
    """The ``train_student`` job: read the inputs, load the base model, train (B and max_doc_chars: the
    training dataset's protocol)."""
    if threads:
        torch.set_num_threads(int(threads))
    prefer_expandable_segments()  # before the model reaches the GPU (CUDA's allocator starts then)
    s = student
    model, tok = load_model(str(model_dir), device=s.device, dtype=s.dtype)
    prov = dict(provenance or {})
    prov["silver"] = {k: v for k, v in read_metadata(silver_path).items() if k in ("teacher", "teacher_spec", "mock", "template_sha256")}
    return train_student(
        model, tok,
        silver=read_table(silver_path, "silver"),
        train_candidates=read_table(train_candidates_path, "candidates"),
        out_dir=out_dir, student=s, B=protocol.B, seed=seed, max_doc_chars=protocol.max_doc_chars,
        train_qrels=read_table(train_qrels_path, "qrels") if train_qrels_path else None,
        heldout_candidates=read_table(heldout_candidates_path, "candidates") if heldout_candidates_path else None,
        heldout_qrels=read_table(heldout_qrels_path, "qrels") if heldout_qrels_path else None,
        provenance=prov,
    )


__all__ = [
    "STUDENT_KEYS", "silver_label_maps", "batch_for_step", "epoch_order", "heldout_eval",
    "lr_warmup_steps", "build_objective", "latest_checkpoint", "train_student", "train_student_files",
]
