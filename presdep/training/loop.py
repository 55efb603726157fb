"""LoRA training of a student scorer on silver labels, with checkpoints and resume.

Layout of one run (``out_dir`` = ``results/models/<student>/seed<seed>/``)::

    checkpoints/step000010/adapter/      peft adapter at that step (kept for selection)
    checkpoints/step000010/trainer.pt    optimizer + RNG state + step (latest checkpoint only)
    checkpoints/step000010/log.json      train-log rows up to that step
    adapter/                             the final adapter
    train_log.parquet                    step, loss terms, lr, tokens, held-out nDCG@10 and score spread (eval steps)
    heldout.parquet                      step, query_id, ndcg10 (per query, at eval steps)
    done.json                            settings, view seeds, held-out figures, checkpoints; written last

Everything a step does derives from (seed, step): the item order of an epoch
is a stable shuffle, the views are stable shuffles of the seed's view seeds, dropout draws from the torch
RNG whose state is checkpointed. So a run killed at any point and resumed from
its last checkpoint ends with the same adapter as an uninterrupted run (on the
same device and software).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import polars as pl
import torch
from tqdm.auto import tqdm

from presdep import __version__
from presdep.presentations import chunk_positions, random_shuffle, stable_seed
from presdep.resume import resume_dir
from presdep.schemas import write_text_atomic
from presdep.training.lora import add_lora, adapter_state, load_adapter_state, save_adapter
from presdep.training.objectives import (
    VIEW_SEED_RULE,
    Objective,
    QueryList,
    TrainItem,
    build_queries,
    make_objective,
    slot_propensity_weights,
    view_seeds_for,
)
from presdep.training.readout_grad import GradReadout, ReadoutScorer

log = logging.getLogger(__name__)

# Every setting the loop reads; their defaults live in the workflow's config schema only.
STUDENT_KEYS = ("objective", "lambda", "lambda_warmup_steps", "n_views", "view_seed_base", "steps", "batch_chunks",
                "lr", "lr_warmup_ratio", "weight_decay", "betas", "max_grad_norm", "checkpoint_every",
                "eval_batch_prompts", "debias_eps", "lora", "device", "dtype", "gradient_checkpointing")
LOG_COLUMNS = ("step", "epoch", "loss", "supervised", "consistency", "lambda", "lr", "grad_norm", "tokens",
               "seconds", "heldout_ndcg10", "heldout_score_std")


def student_settings(spec: Mapping[str, Any]) -> dict:
    """The student settings, checked: every key of STUDENT_KEYS present (``eval_every`` optional)."""
    s = copy.deepcopy(dict(spec))
    missing = [k for k in STUDENT_KEYS if k not in s]
    if missing:
        raise ValueError(f"student settings lack {missing} (the config schema gives their defaults)")
    for key in ("steps", "batch_chunks", "checkpoint_every", "n_views"):
        if not isinstance(s[key], int) or s[key] < 1:
            raise ValueError(f"student {key} must be a positive integer, got {s[key]!r}")
    if not 0.0 <= float(s["lr_warmup_ratio"]) <= 1.0:
        raise ValueError(f"student lr_warmup_ratio must be in [0, 1], got {s['lr_warmup_ratio']!r}")
    if len(s["betas"]) != 2 or not all(0.0 <= float(b) < 1.0 for b in s["betas"]):
        raise ValueError(f"student betas must be two numbers in [0, 1), got {s['betas']!r}")
    if s.get("eval_every") is None:
        s["eval_every"] = s["checkpoint_every"]
    if s["eval_every"] % s["checkpoint_every"]:
        raise ValueError("student eval_every must be a multiple of checkpoint_every (evaluated adapters are kept)")
    return s


# ----------------------------------------------------------------- data


def silver_label_maps(silver: pl.DataFrame) -> tuple[dict, dict]:
    """(k1 labels, k10 labels) keyed by (query_id, doc_id): the silver table's ``label_k1``
    (the teacher's score under shuffle 0) and ``label`` (the mean over its T shuffles)
    columns, repeated on a document's rows. Missing or failed values are None."""
    for col in ("label_k1", "label"):
        if col not in silver.columns:
            raise ValueError(f"silver labels lack the column {col!r}; have {silver.columns}")
    k1: dict[tuple[str, str], float | None] = {}
    k10: dict[tuple[str, str], float | None] = {}
    for q, d, a, m in silver.select("query_id", "doc_id", "label_k1", "label").unique(
            ["query_id", "doc_id"], keep="first", maintain_order=True).iter_rows():
        key = (str(q), str(d))
        k1[key] = None if a is None or math.isnan(a) else float(a)
        k10[key] = None if m is None or math.isnan(m) else float(m)
    return k1, k10


def epoch_order(seed: int, epoch: int, n_chunks: int) -> list[int]:
    return random_shuffle(list(range(n_chunks)), stable_seed(int(seed), "epoch", int(epoch)))


def batch_for_step(seed: int, step: int, batch_chunks: int, n_items: int) -> list[tuple[int, int]]:
    """(epoch, item index) pairs of 0-based ``step``: a stream of epoch permutations."""
    out = []
    for k in range(step * batch_chunks, (step + 1) * batch_chunks):
        epoch, i = divmod(k, n_items)
        out.append((epoch, epoch_order(seed, epoch, n_items)[i]))
    return out


def heldout_eval(
    scorer: Any, candidates: pl.DataFrame, qrels: pl.DataFrame, B: int, k: int = 10
) -> tuple[dict[str, float], float]:
    """(per-query nDCG@k, standard deviation of all scores) of the first-stage pass (contiguous chunks).

    The score spread is what the lambda rule's collapse floor reads: a student that
    gives every document nearly the same score is trivially order-stable.
    """
    from presdep.metrics.quality import ndcg_runs, qrels_to_dict

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


# ----------------------------------------------------------------- checkpoints


def _step_dir(root: Path, step: int) -> Path:
    return root / "checkpoints" / f"step{step:06d}"


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint (one with trainer state), or None."""
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(p for p in root.glob("step*") if p.is_dir() and (p / "trainer.pt").exists())
    return done[-1] if done else None


def _write_checkpoint(out_dir: Path, step: int, model, optimizer, rows: list[dict], heldout_rows: list[dict]) -> Path:
    final = _step_dir(out_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        save_adapter(model, tmp / "adapter")
        torch.save(
            {
                "step": step,
                "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                "adapter": adapter_state(model),
            },
            tmp / "trainer.pt",
        )
        (tmp / "log.json").write_text(json.dumps({"rows": rows, "heldout": heldout_rows}))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    # Only the newest checkpoint keeps optimizer state; older adapters stay for selection.
    for old in (out_dir / "checkpoints").glob("step*"):
        if old != final and (old / "trainer.pt").exists():
            (old / "trainer.pt").unlink()
    return final


def _frame_sha(df: pl.DataFrame | None) -> str | None:
    if df is None:
        return None
    import hashlib

    h = hashlib.sha256()
    for name in sorted(df.columns):
        h.update(name.encode() + b"\x00")
        for v in df.sort(sorted(df.columns))[name].to_list():
            h.update(repr(v).encode() + b"\x1f")
    return h.hexdigest()


def _fingerprint(s, B, seed, max_doc_chars, *frames) -> str:
    """What a checkpoint must share with this run to be resumed (settings, seed, data)."""
    ident = {"presdep_version": __version__, "student": s, "B": B, "seed": seed, "max_doc_chars": max_doc_chars,
             "data": [_frame_sha(f) for f in frames]}
    return json.dumps(ident, sort_keys=True, default=str)


def lr_warmup_steps(steps: int, ratio: float) -> int:
    """Warm-up length from the ratio (ceil, so any positive ratio warms up at least one step)."""
    return int(math.ceil(float(ratio) * int(steps)))


def _lr_at(step: int, lr: float, warmup: int) -> float:
    return lr * min(1.0, (step + 1) / warmup) if warmup > 0 else lr


def build_objective(s: Mapping[str, Any], *, B: int, seed: int, queries: Sequence[QueryList],
                    train_qrels: pl.DataFrame | None) -> tuple[Objective, list[int]]:
    """The objective of settings ``s`` for training seed ``seed`` and its view seeds."""
    view_seeds = view_seeds_for(int(seed), int(s["n_views"]), int(s["view_seed_base"]))
    slot_w = None
    if s["objective"] == "debias_first":
        if train_qrels is None:
            raise ValueError("debias_first needs the training split's qrels (slot propensities)")
        rel = {(str(q), str(d)) for q, d, r in train_qrels.select("query_id", "doc_id", "relevance").iter_rows()
               if r is not None and r >= 1}
        flags = [[(q.query_id, q.doc_ids[i]) in rel for i in pos]
                 for q in queries for pos in chunk_positions(len(q), B, "contiguous")]
        slot_w = slot_propensity_weights(flags, B, float(s["debias_eps"]))
    obj = make_objective(s["objective"], B=B, view_seeds=view_seeds, lam=float(s["lambda"]),
                         lambda_warmup_steps=int(s["lambda_warmup_steps"]), slot_weights=slot_w)
    return obj, view_seeds


# ----------------------------------------------------------------- training


def train_student(
    model: Any,
    tokenizer: Any,
    *,
    silver: pl.DataFrame,
    train_candidates: pl.DataFrame,
    out_dir: str | os.PathLike,
    student: Mapping[str, Any],
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
    s = student_settings(student)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device

    k1, k10 = silver_label_maps(silver)
    queries = build_queries(train_candidates.to_dicts(), k1, k10)
    if not queries:
        raise ValueError("no training queries: the training candidates are empty")
    built_obj, view_seeds = build_objective(s, B=B, seed=seed, queries=queries, train_qrels=train_qrels)
    objective = objective or built_obj
    n_labelled = sum(int(objective.labels(q)[1].sum()) for q in queries)
    if n_labelled == 0:
        raise ValueError(f"no training document carries a {objective.label!r} silver label")
    epoch_items: dict[int, list[TrainItem]] = {}

    def items_of(epoch: int) -> list[TrainItem]:
        if epoch not in epoch_items:
            epoch_items.clear()  # one epoch at a time: a step spans at most two
            epoch_items[epoch] = objective.items(queries, epoch)
        return epoch_items[epoch]

    n_items = len(items_of(0))

    if s["gradient_checkpointing"] is True or (s["gradient_checkpointing"] == "auto" and device.type == "cuda"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    peft_model = add_lora(model, s["lora"], seed)
    readout = GradReadout(peft_model, tokenizer, max_doc_chars=max_doc_chars)
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=float(s["lr"]), weight_decay=float(s["weight_decay"]),
                                  betas=(float(s["betas"][0]), float(s["betas"][1])))
    warmup = lr_warmup_steps(s["steps"], s["lr_warmup_ratio"])

    rows: list[dict] = []
    heldout_rows: list[dict] = []
    start = 0
    fingerprint = _fingerprint({**s, "objective_spec": objective.describe()}, B, seed, max_doc_chars, silver,
                               train_candidates, train_qrels, heldout_candidates, heldout_qrels)
    resume_dir(out_dir / "checkpoints", fingerprint)
    ckpt = latest_checkpoint(out_dir)
    if ckpt is not None:
        state = torch.load(ckpt / "trainer.pt", map_location="cpu", weights_only=False)
        load_adapter_state(peft_model, state["adapter"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        saved = json.loads((ckpt / "log.json").read_text())
        rows, heldout_rows, start = saved["rows"], saved["heldout"], int(state["step"])
        log.info("resuming from %s (step %d of %d)", ckpt, start, s["steps"])
    else:
        torch.manual_seed(stable_seed(int(seed), "train-rng") % (2**63))

    do_eval = heldout_candidates is not None and heldout_qrels is not None
    eval_scorer = ReadoutScorer(peft_model, tokenizer, name="student", max_doc_chars=max_doc_chars,
                                batch_prompts=int(s["eval_batch_prompts"])) if do_eval else None
    t_start = time.perf_counter()
    peft_model.train()
    with tqdm(total=s["steps"], initial=start, desc=f"train {s['objective']} seed{seed}", unit="step") as bar:
        for step in range(start, s["steps"]):
            t0 = time.perf_counter()
            for g in optimizer.param_groups:
                g["lr"] = _lr_at(step, float(s["lr"]), warmup)
            picks = batch_for_step(seed, step, s["batch_chunks"], n_items)
            batch = []
            for e, i in picks:
                its = items_of(e)
                if len(its) != n_items:
                    raise RuntimeError(f"epoch {e} has {len(its)} training items, epoch 0 had {n_items}")
                batch.append(its[i])
            prompts = [(queries[it.query].query, [queries[it.query].docs[i] for i in view])
                       for it in batch for view in it.views]
            built = readout.build(prompts)
            flat = readout.expected_from_built(built)
            scores, k = [], 0
            for it in batch:
                scores.append(flat[k : k + len(it.views)])
                k += len(it.views)
            loss, parts = objective.loss(queries, batch, scores, step)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(params, float(s["max_grad_norm"]))
            optimizer.step()
            done_steps = step + 1
            row = {
                "step": done_steps, "epoch": picks[0][0], "loss": parts["loss"], "supervised": parts["supervised"],
                "consistency": parts.get("consistency"), "lambda": parts.get("lambda"),
                "lr": optimizer.param_groups[0]["lr"], "grad_norm": float(gnorm),
                "tokens": sum(len(b.ids) for b in built), "seconds": time.perf_counter() - t0,
                "heldout_ndcg10": None, "heldout_score_std": None,
            }
            if do_eval and (done_steps % s["eval_every"] == 0 or done_steps == s["steps"]):
                per_q, spread = heldout_eval(eval_scorer, heldout_candidates, heldout_qrels, B)
                row["heldout_ndcg10"] = float(np.mean(list(per_q.values()))) if per_q else None
                row["heldout_score_std"] = spread
                heldout_rows += [{"step": done_steps, "query_id": q, "ndcg10": v} for q, v in sorted(per_q.items())]
                peft_model.train()
            rows.append(row)
            if done_steps % s["checkpoint_every"] == 0 or done_steps == s["steps"]:
                _write_checkpoint(out_dir, done_steps, peft_model, optimizer, rows, heldout_rows)
            bar.set_postfix(loss=f"{parts['loss']:.4f}")
            bar.update(1)
            if on_step is not None:
                on_step(done_steps)

    wall = time.perf_counter() - t_start
    final_tmp = Path(tempfile.mkdtemp(prefix=".adapter.", suffix=".tmp", dir=out_dir))
    try:
        save_adapter(peft_model, final_tmp)
        if (out_dir / "adapter").exists():
            shutil.rmtree(out_dir / "adapter")
        os.replace(final_tmp, out_dir / "adapter")
    finally:
        if final_tmp.exists():
            shutil.rmtree(final_tmp, ignore_errors=True)
    schema = {c: (pl.Int64 if c in ("step", "epoch", "tokens") else pl.Float64) for c in LOG_COLUMNS}
    log_df = pl.DataFrame([{c: r.get(c) for c in LOG_COLUMNS} for r in rows], schema=schema)
    # The log carries its run's view seeds, so a log read alone says which views trained it.
    log_meta = {"seed": str(int(seed)), "view_seeds": json.dumps(view_seeds), "objective": s["objective"],
                "view_seed_rule": f"{VIEW_SEED_RULE} (N = {s['n_views']}, base = {s['view_seed_base']})"}
    _write_parquet_atomic(log_df, out_dir / "train_log.parquet", log_meta)
    _write_parquet_atomic(
        pl.DataFrame(heldout_rows, schema={"step": pl.Int64, "query_id": pl.String, "ndcg10": pl.Float64}),
        out_dir / "heldout.parquet",
    )
    checkpoints = sorted(int(p.name[4:]) for p in (out_dir / "checkpoints").glob("step*") if (p / "adapter").is_dir())
    timed = [r["seconds"] for r in rows[start:]]
    done = {
        "presdep_version": __version__,
        "seed": int(seed),
        "view_seeds": view_seeds,
        "view_seed_rule": log_meta["view_seed_rule"],
        "student": {k: v for k, v in s.items()},
        "objective": objective.describe(),
        "B": int(B),
        "max_doc_chars": max_doc_chars,
        "template_sha256": readout.template_sha256,
        "n_queries": len(queries),
        "items_per_epoch": n_items,
        "n_labelled_docs": n_labelled,
        "steps": s["steps"],
        "lr_warmup_steps": warmup,
        "resumed_from_step": start if ckpt is not None else None,
        "checkpoints": checkpoints,
        "adapter": "adapter",
        "device": device.type,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "wall_seconds_this_run": wall,
        "seconds_per_step": float(np.mean(timed)) if timed else None,
        "heldout": {str(r["step"]): r["heldout_ndcg10"] for r in rows if r.get("heldout_ndcg10") is not None},
        "heldout_score_std": {str(r["step"]): r["heldout_score_std"] for r in rows
                              if r.get("heldout_score_std") is not None},
        "provenance": dict(provenance or {}),
    }
    write_text_atomic(out_dir / "done.json", json.dumps(done, indent=1, sort_keys=True, default=str) + "\n")
    return done


def _write_parquet_atomic(df: pl.DataFrame, path: Path, metadata: Mapping[str, str] | None = None) -> None:
    from presdep.schemas import atomic_write

    atomic_write(path, lambda tmp: df.write_parquet(tmp, metadata=dict(metadata) if metadata else None))


def train_student_files(
    *,
    model_dir: str | os.PathLike,
    silver_path: str | os.PathLike,
    train_candidates_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    student: Mapping[str, Any],
    B: int,
    seed: int,
    max_doc_chars: int | None = None,
    train_qrels_path: str | os.PathLike | None = None,
    heldout_candidates_path: str | os.PathLike | None = None,
    heldout_qrels_path: str | os.PathLike | None = None,
    threads: int | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> dict:
    """The ``train_student`` job: read the inputs, load the base model, train."""
    from presdep.models import load_model
    from presdep.schemas import read_metadata, read_table

    if threads:
        torch.set_num_threads(int(threads))
    s = student_settings(student)
    model, tok = load_model(str(model_dir), device=s["device"], dtype=s["dtype"])
    prov = dict(provenance or {})
    prov["silver"] = {k: v for k, v in read_metadata(silver_path).items() if k in ("teacher", "teacher_spec", "mock", "template_sha256")}
    return train_student(
        model, tok,
        silver=read_table(silver_path, "silver"),
        train_candidates=read_table(train_candidates_path, "candidates"),
        out_dir=out_dir, student=s, B=B, seed=seed, max_doc_chars=max_doc_chars,
        train_qrels=read_table(train_qrels_path, "qrels") if train_qrels_path else None,
        heldout_candidates=read_table(heldout_candidates_path, "candidates") if heldout_candidates_path else None,
        heldout_qrels=read_table(heldout_qrels_path, "qrels") if heldout_qrels_path else None,
        provenance=prov,
    )


__all__ = [
    "STUDENT_KEYS", "student_settings", "silver_label_maps", "batch_for_step", "epoch_order", "heldout_eval",
    "lr_warmup_steps", "build_objective", "latest_checkpoint", "train_student", "train_student_files",
]
