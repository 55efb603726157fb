"""Matched retention, the paper's form (docs/methods/jaccard.md#matched-retention-the-papers-form).

presdep's own matched-retention control (``matched_jaccard``: every presentation keeps as many
documents as the canonical one does at t*) removes score drift between presentations. The
paper's form removes instead the differences in how much each trained arm keeps: per
(training seed, dataset)

1. the target is single-order distillation's mean development retention of the canonical
   presentation at its own F1-tuned t*;
2. every trained arm re-tunes its threshold on its own 41-point grid (the artifact's ``grid``)
   to the value whose mean development canonical retention is closest to the target, ties to
   the higher threshold;
3. on the test half, at that threshold: per query the mean pairwise Jaccard of the retained
   sets over the random shuffles and the set flip = unstable / ever-retained, undefined (null)
   when nothing is ever retained, as the paper has it; ``set_flip_zero`` is presdep's rule
   for that case (0), kept beside it as a named option.

Rows use the metrics contract under perturbation ``matched_retention_reference``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from presdep.contracts.schemas import read_table, write_table
from presdep.contracts.views import RANDOM_SHUFFLE, decision_presentations
from presdep.metrics import decisions
from presdep.metrics.blocks import build_blocks
from presdep.metrics.rows import MetricRows
from presdep.metrics.thresholds import canonical_arrays, read_thresholds

PERTURBATION = "matched_retention_reference"


def mean_retention(canonical: Sequence[np.ndarray], threshold: float) -> float:
    """Mean over queries of the share of a query's canonical pool scoring >= threshold."""
    return float(np.mean([np.mean(s >= threshold) for s in canonical])) if canonical else math.nan


def matched_threshold(grid: Sequence[float], canonical: Sequence[np.ndarray], target: float) -> tuple[float, float]:
    """(threshold, its mean retention): the grid value whose mean retention is closest to
    ``target``; walking the grid upwards, a value at least as close takes over (ties: higher t)."""
    best_t, best_r, best_gap = math.nan, math.nan, math.inf
    for t in sorted(float(x) for x in grid):
        r = mean_retention(canonical, t)
        if abs(r - target) <= best_gap:
            best_t, best_r, best_gap = t, r, abs(r - target)
    return best_t, best_r


def test_set_values(view: pl.DataFrame, test: Sequence[str], threshold: float) -> dict[str, list]:
    """Per test query at ``threshold``: Jaccard, set flip (null when never retained) and set flip 0."""
    out: dict[str, list] = {"query_id": [], "jaccard": [], "set_flip": [], "set_flip_zero": []}
    test_view = view.filter(pl.col("query_id").is_in(list(test)))
    if "perturbation" not in test_view.columns:  # decision presentations are the random shuffles
        test_view = test_view.with_columns(pl.lit(RANDOM_SHUFFLE).alias("perturbation"))
    blocks = build_blocks(test_view).get(RANDOM_SHUFFLE, [])
    for b in blocks:
        kept = decisions.retained(b.scores, threshold)
        jac, flip = decisions.pair_stats(kept)
        out["query_id"].append(b.query_id)
        out["jaccard"].append(jac)
        out["set_flip"].append(flip if kept.any() else math.nan)
        out["set_flip_zero"].append(flip)
    return out


def reference_rows(arm: pl.DataFrame, arm_thr: Mapping[str, Any], reference: pl.DataFrame,
                   reference_thr: Mapping[str, Any], *, bsc_k: int = 1, ensembles: int = 4) -> MetricRows:
    """The paper's matched-retention rows of one arm, its target from the single-order ``reference``."""
    arm_view = decision_presentations(arm, bsc_k=bsc_k, ensembles=ensembles)
    ref_view = decision_presentations(reference)
    target = mean_retention(canonical_arrays(ref_view, reference_thr["dev_queries"], {})[0],
                            float(reference_thr["t_star"]))
    dev = canonical_arrays(arm_view, arm_thr["dev_queries"], {})[0]
    t, dev_retention = matched_threshold(arm_thr["grid"], dev, target)
    rows = MetricRows()
    for metric, value in (("target_retention", target), ("t_matched", t), ("dev_retention", dev_retention),
                          ("t_star", float(arm_thr["t_star"]))):
        rows.add(PERTURBATION, None, metric, value)
    values = test_set_values(arm_view, arm_thr["test_queries"], t)
    for metric in ("jaccard", "set_flip", "set_flip_zero"):
        rows.per_query(PERTURBATION, metric, values["query_id"], values[metric])
    return rows


def reference_from_files(arm_scores: str, arm_thresholds: str, reference_scores: str, reference_thresholds: str,
                         out_path: str, *, dataset: str, variant: str, seed: int | None, bsc_k: int = 1,
                         ensembles: int = 4) -> pl.DataFrame:
    """The workflow's entry point (rule ``matched_reference``): one arm on one dataset."""
    rows = reference_rows(read_table(arm_scores, "scores"), read_thresholds(arm_thresholds),
                          read_table(reference_scores, "scores"), read_thresholds(reference_thresholds),
                          bsc_k=bsc_k, ensembles=ensembles)
    n = len(rows.metric)
    df = pl.DataFrame({"dataset": [dataset] * n, "task": ["rerank"] * n, "variant": [variant] * n,
                       "seed": pl.Series([seed] * n, dtype=pl.Int32), "perturbation": rows.pert,
                       "query_id": pl.Series(rows.qid, dtype=pl.String), "metric": rows.metric,
                       "value": pl.Series(rows.value, dtype=pl.Float64)})
    write_table(df, out_path, "metrics", {"reference_scores": str(reference_scores)})
    return df


__all__ = ["PERTURBATION", "matched_threshold", "mean_retention", "reference_from_files", "reference_rows",
           "test_set_values"]
