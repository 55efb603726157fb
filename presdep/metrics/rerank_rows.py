"""Reranking rows: retained-set metrics at the frozen threshold t* and the threshold's own rows."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any, Mapping

import numpy as np
import polars as pl

from presdep.contracts.views import RANDOM_SHUFFLE
from presdep.metrics import decisions
from presdep.metrics.blocks import Block
from presdep.metrics.rows import MetricRows

log = logging.getLogger(__name__)

# The degenerate-decision flags (docs/methods/jaccard.md#when-the-number-means-nothing): aggregate
# rows under perturbation random_shuffle, 1.0 raised / 0.0 not (a count for the last two), null when
# the rule cannot be decided (no test-half query in the scores; a threshold artifact without grid).
# Mean test-half retention above this share: nearly the whole pool is kept, so every retained set
# is nearly the pool and Jaccard is close to 1 whatever the scorer does (two sets that each keep
# a share r of the pool share at least 2r - 1 of it: at r = 0.9 their Jaccard is at least 0.8).
RETENTION_HIGH = 0.90
# Mean test-half retention below this share: most retained sets hold a document or two (or none,
# and two empty sets count as equal), so Jaccard swings between 0 and 1 on single documents.
RETENTION_LOW = 0.10
# Fewer test-half queries than this: one query carries more than a tenth of the cell's mean
# (Jaccard lies in [0, 1], so one query can move the mean by up to 1/n > 0.1), which is larger than
# the differences between Table 1's rows. DL19 (21 test queries) and the paper's collections pass;
# the embedded default (2 test queries) is flagged, as it should be: it checks the pipeline.
MIN_TEST_QUERIES = 10

# metric -> the words the counts file, table1.md's note, the logs and the stability report use.
# These six make the Jaccard cell's number say little about the scorer: a cell with one of them
# raised is "degenerate" (marked in table1.md, left out of the stability ranking).
DEGENERATE_FLAGS: dict[str, str] = {
    "warn_threshold_keeps_all": "t* keeps every candidate",
    "warn_threshold_keeps_none": "t* keeps no candidate",
    "warn_threshold_grid_edge": "t* at the edge of its grid",
    "warn_retention_high": f"mean retention above {RETENTION_HIGH:.2f}",
    "warn_retention_low": f"mean retention below {RETENTION_LOW:.2f}",
    "warn_few_test_queries": f"fewer than {MIN_TEST_QUERIES} test queries",
}
# The Table 1 metrics a raised degenerate flag concerns (the retained-set decision at t*).
DEGENERATE_METRICS = ("jaccard",)
# Counted warnings (value = number of queries): they limit a cell but do not make it degenerate.
COUNTED_WARNINGS: dict[str, str] = {
    "warn_single_presentation": "queries with fewer than two presentations",
    "warn_queries_without_relevant": "queries without a relevant document in the pool",
}


def rerank_set_values(b: Block, relevant: np.ndarray, t_star: float) -> dict[str, float]:
    """Retained-set statistics of one query's (M, n) presentations at t* (see decisions)."""
    kept = decisions.retained(b.scores, t_star)
    jac, flip = decisions.pair_stats(kept)
    q = decisions.retained_quality(kept, relevant)
    matched = decisions.matched_kept(b.scores, b.positions, int(kept[0].sum()))
    mj, mf = decisions.pair_stats(matched)
    return {
        "jaccard": jac,
        "set_flip": flip,
        "retained_size": float(kept.sum(axis=1).mean()),
        **{k: float(v.mean()) for k, v in q.items()},
        **{f"canonical_{k}": float(v[0]) for k, v in q.items()},
        # population variance of each doc's score across presentations, mean over docs
        "score_variance": float(b.scores.var(axis=0).mean()) if b.scores.shape[0] >= 2 else math.nan,
        "matched_jaccard": mj,
        "matched_set_flip": mf,
    }


def add_retained_set_rows(rows: MetricRows, pert: str, bl: list[Block], qrels_d, t_star: float) -> None:
    if not bl:
        log.warning("%s: no test-half query in the scores; no retained-set metrics", pert)
        return
    per = [
        rerank_set_values(b, np.array([qrels_d.get(b.query_id, {}).get(d, 0) >= 1 for d in b.doc_ids]), t_star)
        for b in bl
    ]
    qids = [b.query_id for b in bl]
    for name in per[0]:
        rows.per_query(pert, name, qids, [p[name] for p in per])


def _grid_edge(thr: Mapping[str, Any], t: float) -> float | None:
    """1.0 if t* is the grid's first or last value, 0.0 if inside it, None if the artifact has no grid.

    t* is a grid value by construction (presdep.metrics.thresholds), so equality is exact."""
    grid = thr.get("grid")
    if grid:
        lo, hi = float(grid[0]), float(grid[-1])
    elif thr.get("grid_min") is not None and thr.get("grid_max") is not None:
        lo, hi = float(thr["grid_min"]), float(thr["grid_max"])
    else:
        return None
    return float(t == lo or t == hi)


def threshold_flags(thr: Mapping[str, Any], test: list[Block]) -> dict[str, float | None]:
    """The degenerate-decision flags (DEGENERATE_FLAGS) of threshold ``thr`` on the test-half blocks."""
    t = float(thr["t_star"])
    kept = np.concatenate([(b.scores >= t).ravel() for b in test]) if test else np.zeros(0, bool)
    # mean over test queries of the retained share of the pool, mean over presentations (= `retention`)
    retention = float(np.mean([(b.scores >= t).mean() for b in test])) if test else None
    return {
        "warn_threshold_keeps_all": float(kept.size > 0 and kept.all()),
        "warn_threshold_keeps_none": float(kept.size > 0 and not kept.any()),
        "warn_threshold_grid_edge": _grid_edge(thr, t),
        "warn_retention_high": None if retention is None else float(retention > RETENTION_HIGH),
        "warn_retention_low": None if retention is None else float(retention < RETENTION_LOW),
        "warn_few_test_queries": float(len(test) < MIN_TEST_QUERIES),
    }


def add_threshold_rows(rows: MetricRows, thr: Mapping[str, Any], bl: list[Block], qrels_d, test_q: set[str]) -> None:
    """t* and the degenerate-decision flags (1 = raised), counted on the test half."""
    t = float(thr["t_star"])
    rows.add(RANDOM_SHUFFLE, None, "t_star", t)
    test = [b for b in bl if b.query_id in test_q]
    flags = threshold_flags(thr, test)
    for name, value in flags.items():
        rows.add(RANDOM_SHUFFLE, None, name, value)
    rows.add(RANDOM_SHUFFLE, None, "warn_single_presentation", float(sum(b.scores.shape[0] < 2 for b in bl)))
    no_rel = sum(not any(qrels_d.get(b.query_id, {}).get(d, 0) >= 1 for d in b.doc_ids) for b in bl)
    rows.add(RANDOM_SHUFFLE, None, "warn_queries_without_relevant", float(no_rel))
    for name, value in flags.items():
        if value:
            log.warning("degenerate decision: %s (t* = %.6g, %d test queries)", DEGENERATE_FLAGS[name], t, len(test))
    if no_rel:
        log.warning("%d queries have no relevant document in their pool (F1 0)", no_rel)


def flag_place(dataset: str, seed: int | None) -> str:
    """Where a flag was raised, as the counts file writes it: ``dl19`` or ``dl19[seed 1]``."""
    return dataset + ("" if seed is None else f"[seed {seed}]")


def raised_flags(metrics: pl.DataFrame, names: Iterable[str] = tuple(DEGENERATE_FLAGS)) -> pl.DataFrame:
    """The raised flags among ``names`` in a (concatenated) metrics table: its aggregate rows
    (query_id null) under perturbation random_shuffle with value > 0. Columns variant, task,
    dataset, seed, metric, value, sorted by variant, task, dataset, seed, then ``names``' order."""
    order = {n: i for i, n in enumerate(names)}
    hit = metrics.filter(
        pl.col("metric").is_in(list(order)) & (pl.col("perturbation") == RANDOM_SHUFFLE)
        & pl.col("query_id").is_null() & (pl.col("value") > 0)
    ).select("variant", "task", "dataset", "seed", "metric", "value")
    return (hit.with_columns(pl.col("metric").replace_strict(order, return_dtype=pl.Int64).alias("_order"))
            .sort("variant", "task", "dataset", "seed", "_order", nulls_last=False).drop("_order"))
