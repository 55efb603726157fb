"""The reranking threshold t*: a development/test split and a threshold tuned on it.

Protocol (docs/methods/jaccard.md):

* Split (SPLIT_RULE): each dataset's sorted unique query ids are shuffled in place
  by ``numpy.random.default_rng(split_seed).shuffle``; the first
  max(1, round(0.5 n)) (Python's round: half to even) are the development half, the
  rest the test half (43 DL19 queries: 22 / 21). numpy's Generator streams are
  stable across platforms, so the same seed and query ids give the same split on
  any machine; the halves are disjoint and cover every query.
* Grid (GRID_SPAN): 41 evenly spaced values from min to max of the canonical
  scores (presentation 0 of the decision presentations: shuffle 0, or ensemble 0
  of the BSC scores) of ALL the run's queries of the dataset, development and
  test alike.
* t*: on the development half only, canonical presentation, the grid value with
  the highest mean set-F1 against the relevant docs (grade >= 1) in each pool (a
  query without relevant doc scores 0); ties in mean F1 are exact, the higher
  threshold wins (presdep.metrics.decisions).

The artifact (one JSON file per run and dataset) is the one place the metrics and
Figure 1 read t* from. It is written with a content digest and verified on every read
(presdep.contracts.json_artifacts): a damaged or hand-edited file (a changed t*) is refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput, cut
from presdep.contracts.json_artifacts import read_json_artifact, write_json_artifact
from presdep.contracts.schemas import read_table
from presdep.contracts.views import CANONICAL_PRESENTATION, decision_presentations
from presdep.metrics import decisions
from presdep.metrics.quality import qrels_to_dict

log = logging.getLogger(__name__)

SPLIT_SEED = 20260610
# Recorded in every artifact beside split_seed / the grid: which rules produced it.
SPLIT_RULE = "numpy_default_rng_shuffle_sorted_ids_round_half_even"
GRID_SPAN = "all_queries_canonical"
TIE_RULE = "exact_mean_f1_higher_threshold"
_REQUIRED_KEYS = ("t_star", "split_seed", "canonical_presentation", "dev_queries", "test_queries", "grid_size")


def split_queries(query_ids: Sequence[str], seed: int = SPLIT_SEED) -> tuple[list[str], list[str]]:
    """(development, test) halves of ``query_ids``, each sorted; deterministic in (seed, ids).

    The sorted ids are shuffled in place by ``numpy.random.default_rng(seed).shuffle``;
    development = the first max(1, round(0.5 n)) (half to even), test = the rest.
    """
    ids = sorted(set(str(q) for q in query_ids))
    if len(ids) != len(query_ids):
        raise InvalidInput("query ids to split must be unique")
    if not ids:
        return [], []
    np.random.default_rng(seed).shuffle(ids)  # a list and an object array give the same permutation
    n_dev = max(1, round(0.5 * len(ids)))
    return sorted(ids[:n_dev]), sorted(ids[n_dev:])


def canonical_arrays(view: pl.DataFrame, queries: Sequence[str], qrels_d) -> tuple[list[np.ndarray], list[np.ndarray]]:
    canon = view.filter(
        (pl.col("presentation") == CANONICAL_PRESENTATION) & pl.col("query_id").is_in(list(queries))
    ).sort("query_id", "doc_id")
    scores, relevant = [], []
    for (q,), part in canon.group_by(["query_id"], maintain_order=True):
        judged = qrels_d.get(q, {})
        scores.append(part["score"].to_numpy())
        relevant.append(np.array([judged.get(d, 0) >= 1 for d in part["doc_id"].to_list()], dtype=bool))
    return scores, relevant


def tune_thresholds(
    scores: pl.DataFrame,
    qrels: pl.DataFrame,
    *,
    split_seed: int = SPLIT_SEED,
    bsc_k: int = 1,
    ensembles: int = 4,
    n_grid: int = decisions.N_GRID,
) -> dict[str, Any]:
    """The threshold artifact of one run on one reranking dataset (see module doc)."""
    view = decision_presentations(scores, bsc_k=bsc_k, ensembles=ensembles)
    if view.height == 0:
        raise InvalidInput("scores have no random_shuffle presentations to tune the threshold on")
    qids = sorted(view["query_id"].unique().to_list())
    dev, test = split_queries(qids, split_seed)
    if not dev or not test:
        raise InvalidInput(f"a 50/50 split needs at least 2 queries; the scores have {len(qids)}")
    qrels_d = qrels_to_dict(qrels)
    all_scores, _ = canonical_arrays(view, qids, qrels_d)
    grid = decisions.threshold_grid(all_scores, n_grid)  # spans every query, t* from the dev half
    dev_scores, dev_rel = canonical_arrays(view, dev, qrels_d)
    grid, mean_f1 = decisions.threshold_curve(dev_scores, dev_rel, n_grid, grid=grid)
    best = decisions.best_grid_index(mean_f1)
    t_star = float(grid[best])
    warnings = degenerate_warnings(view, qrels_d, t_star)
    for w in warnings:
        log.warning("threshold: %s", w)
    return {
        "t_star": t_star,
        "split_seed": int(split_seed),
        "split_rule": SPLIT_RULE,
        "canonical_presentation": CANONICAL_PRESENTATION,
        "grid_size": int(n_grid),
        "grid_span": GRID_SPAN,
        "grid_min": float(grid[0]),
        "grid_max": float(grid[-1]),
        "tie_rule": TIE_RULE,
        "grid": grid.tolist(),
        "dev_mean_f1": mean_f1.tolist(),
        "dev_best_f1": float(mean_f1[best]),
        "dev_queries": dev,
        "test_queries": test,
        "bsc_k": int(bsc_k),
        "bsc_ensembles": int(ensembles) if bsc_k > 1 else None,
        "warnings": warnings,
    }


def degenerate_warnings(view: pl.DataFrame, qrels_d: Mapping[str, Mapping[str, int]], t_star: float) -> list[str]:
    """Human-readable reasons a threshold result says little (empty list = none)."""
    out = []
    kept = view.with_columns((pl.col("score") >= t_star).alias("kept"))
    share = float(kept["kept"].mean())
    if share == 1.0:
        out.append(f"t* = {t_star:.6g} keeps every candidate of every presentation")
    elif share == 0.0:
        out.append(f"t* = {t_star:.6g} keeps no candidate of any presentation")
    n_pres = view.group_by("query_id").agg(pl.col("presentation").n_unique().alias("m"))
    few = n_pres.filter(pl.col("m") < 2)
    if few.height:
        out.append(f"{few.height} queries have fewer than two presentations (no pair to compare)")
    pools = view.filter(pl.col("presentation") == CANONICAL_PRESENTATION).select("query_id", "doc_id")
    no_rel = [
        q for (q,), part in pools.group_by(["query_id"])
        if not any(qrels_d.get(q, {}).get(d, 0) >= 1 for d in part["doc_id"].to_list())
    ]
    if no_rel:
        out.append(f"{len(no_rel)} queries have no relevant document in their pool (F1 0)")
    return out


def write_thresholds(artifact: Mapping[str, Any], path: str | os.PathLike, params: Mapping[str, Any] | None = None):
    """Write the artifact atomically as JSON with its digest (and the parameters that produced it)."""
    doc = dict(artifact)
    doc["params"] = dict(params or {})
    return write_json_artifact(path, doc)


def read_thresholds(path: str | os.PathLike) -> dict[str, Any]:
    """Read, verify and check a threshold artifact. A damaged or edited file is a SchemaError
    naming it (presdep.contracts.json_artifacts); a missing key an InvalidInput naming the key."""
    doc = read_json_artifact(path, "threshold file")
    missing = [k for k in _REQUIRED_KEYS if k not in doc]
    if missing:
        raise InvalidInput(f"{path}: threshold file lacks key(s) {missing}; expected at least {list(_REQUIRED_KEYS)}")
    t = doc["t_star"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not np.isfinite(t):
        raise InvalidInput(f"{path}: t_star must be a finite number, got {cut(t)}")
    for k in ("dev_queries", "test_queries"):
        if not isinstance(doc[k], list) or not all(isinstance(q, str) for q in doc[k]):
            raise InvalidInput(f"{path}: {k} must be a list of query ids (strings), got {cut(doc[k])}")
    if set(doc["dev_queries"]) & set(doc["test_queries"]):
        raise InvalidInput(f"{path}: dev_queries and test_queries overlap")
    return doc


def thresholds_from_files(
    scores_path: str | os.PathLike,
    qrels_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    split_seed: int = SPLIT_SEED,
    bsc_k: int = 1,
    ensembles: int = 4,
) -> dict[str, Any]:
    """The workflow's entry point: read scores and qrels, tune, write the artifact."""
    art = tune_thresholds(
        read_table(scores_path, "scores"), read_table(qrels_path, "qrels"),
        split_seed=split_seed, bsc_k=bsc_k, ensembles=ensembles,
    )
    params = {"scores": str(scores_path), "qrels": str(qrels_path), "split_seed": split_seed,
              "bsc_k": bsc_k, "bsc_ensembles": ensembles}
    write_thresholds(art, out_path, params)
    return art
