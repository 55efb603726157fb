"""Context-decomposition metrics: how much of a batched score's quality comes from width, from what
the companions say, from their mere presence and from the answer skeleton
(docs/methods/context-decomposition.md).

Per query and arm, the pool is ranked by score (ties by first-stage rank) and scored by nDCG@k
through pytrec_eval; on the canonical order (perturbation ``context_canonical``) and averaged
over the shuffles (``context_shuffled``; A1 has one reading, used for both). The terms close
exactly: A2 - A1 = (A2 - A3) + (A3 - A4) + (A4 - A1).

* ``ndcg{k}_A1`` .. ``ndcg{k}_A4``;
* ``width`` = A2 - A1, ``companion_content`` = A2 - A3, ``companion_presence`` = A3 - A4,
  ``skeleton`` = A4 - A1 (screen mode: A1, A4 and ``skeleton`` only);
* ``score_<term>`` and ``score_<term>_abs``: the mean signed and absolute difference of the two
  arms' scores of the same document in the same presentation (A1's single reading against each).

Aggregate rows (query_id null) are means over queries. The donors' length errors (A3) are one
aggregate row each under ``context_donors``: ``length_error_mean``, ``length_error_p95``,
``length_exact_share`` and ``companions``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import polars as pl

from presdep.contracts.context_presentations import CANONICAL
from presdep.contracts.errors import InvalidInput
from presdep.metrics.quality import ndcg_runs, presented_ranks, qrels_to_dict
from presdep.metrics.rows import MetricRows

CANONICAL_PERTURBATION = "context_canonical"
SHUFFLED_PERTURBATION = "context_shuffled"
DONORS_PERTURBATION = "context_donors"
DEFAULT_K = 10
# term -> (minuend arm, subtrahend arm)
TERMS = {"width": ("A2", "A1"), "companion_content": ("A2", "A3"), "companion_presence": ("A3", "A4"),
         "skeleton": ("A4", "A1")}


def arms_of(scores: pl.DataFrame) -> tuple[str, ...]:
    arms = tuple(sorted(scores["arm"].unique().to_list()))
    if arms not in (("A1", "A2", "A3", "A4"), ("A1", "A4")):
        raise InvalidInput(f"context scores hold arms {arms}; expected A1-A4 (full) or A1 and A4 (screen)")
    return arms


def terms_of(arms: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    return {t: ab for t, ab in TERMS.items() if set(ab) <= set(arms)}


def _readings(scores: pl.DataFrame) -> dict[tuple[str, int], dict[str, dict[str, float]]]:
    """{(arm, presentation): {query: {doc: strict score}}}: each query's pool ranked by score, ties
    by first-stage rank, as tie-free scores."""
    out: dict[tuple[str, int], dict[str, dict[str, float]]] = {}
    for (arm, pres, qid), g in scores.group_by("arm", "presentation", "query_id"):
        if g["doc_id"].is_duplicated().any():
            raise InvalidInput(f"context scores: query {qid!r} reads a document twice in arm {arm}, "
                               f"presentation {pres}")
        strict = presented_ranks(g["score"].to_numpy(), g["first_stage_rank"].to_numpy())
        out.setdefault((str(arm), int(pres)), {})[str(qid)] = dict(zip(g["doc_id"].to_list(), strict.tolist()))
    return out


def arm_ndcg(scores: pl.DataFrame, qrels: Mapping[str, Mapping[str, int]], k: int = DEFAULT_K
             ) -> dict[str, dict[str, dict[int, float]]]:
    """{arm: {query: {presentation: nDCG@k}}} (A1 under presentation -1 only)."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for (arm, pres), runs in _readings(scores).items():
        for qid, value in ndcg_runs(runs, qrels, k).items():
            out.setdefault(arm, {}).setdefault(qid, {})[pres] = value
    return out


def _arm_value(got: Mapping[int, float], arm: str, shuffled: bool) -> float:
    if arm == "A1" or not shuffled:
        return got.get(CANONICAL, math.nan)
    values = [v for p, v in got.items() if p != CANONICAL]
    return float(np.mean(values)) if values else math.nan


def _score_differences(scores: pl.DataFrame, a: str, b: str, shuffled: bool) -> pl.DataFrame:
    """Per query the mean signed and absolute score difference a - b on the same document and
    presentation (A1's one reading against every presentation)."""
    keep = (pl.col("presentation") != CANONICAL) if shuffled else (pl.col("presentation") == CANONICAL)
    left = scores.filter((pl.col("arm") == a) & keep).select("query_id", "doc_id", "presentation", "score")
    right = scores.filter(pl.col("arm") == b)
    on = ["query_id", "doc_id"] if b == "A1" else ["query_id", "doc_id", "presentation"]
    right = right.filter(keep) if b != "A1" else right
    both = left.join(right.select(*on, pl.col("score").alias("other")), on=on, how="inner")
    return both.group_by("query_id").agg((pl.col("score") - pl.col("other")).mean().alias("signed"),
                                         (pl.col("score") - pl.col("other")).abs().mean().alias("abs"))


def context_metrics(scores: pl.DataFrame, qrels: pl.DataFrame | Mapping[str, Mapping[str, int]], *, dataset: str,
                    variant: str, donors: Mapping[str, float | int | None] | None = None, seed: int | None = None,
                    task: str = "rerank", k: int = DEFAULT_K) -> pl.DataFrame:
    """The ``metrics`` contract's long rows (see the module doc for the names)."""
    missing = {"query_id", "doc_id", "arm", "presentation", "first_stage_rank", "score"} - set(scores.columns)
    if missing:
        raise InvalidInput(f"context scores lack column(s) {sorted(missing)}")
    qrels_d = qrels_to_dict(qrels) if isinstance(qrels, pl.DataFrame) else qrels
    arms = arms_of(scores)
    ndcg = arm_ndcg(scores, qrels_d, k)
    qids = sorted({q for by_q in ndcg.values() for q in by_q})
    rows = MetricRows()
    for pert, shuffled in ((CANONICAL_PERTURBATION, False), (SHUFFLED_PERTURBATION, True)):
        value = {arm: np.array([_arm_value(ndcg.get(arm, {}).get(q, {}), arm, shuffled) for q in qids])
                 for arm in arms}
        for arm in arms:
            rows.per_query(pert, f"ndcg{k}_{arm}", qids, value[arm])
        for term, (a, b) in terms_of(arms).items():
            rows.per_query(pert, term, qids, value[a] - value[b])
        for term, (a, b) in terms_of(arms).items():
            diff = {r["query_id"]: r for r in _score_differences(scores, a, b, shuffled).iter_rows(named=True)}
            every = sorted(diff)
            rows.per_query(pert, f"score_{term}", every, [diff[q]["signed"] for q in every])
            rows.per_query(pert, f"score_{term}_abs", every, [diff[q]["abs"] for q in every])
    if donors and donors.get("companions"):
        for metric, key in (("length_error_mean", "mean"), ("length_error_p95", "p95"),
                            ("length_exact_share", "exact_share"), ("companions", "companions")):
            rows.add(DONORS_PERTURBATION, None, metric, donors.get(key))
    return rows.frame(dataset=dataset, variant=variant, seed=seed, task=task)


__all__ = ["CANONICAL_PERTURBATION", "DEFAULT_K", "DONORS_PERTURBATION", "SHUFFLED_PERTURBATION", "TERMS", "arm_ndcg",
           "arms_of", "context_metrics", "terms_of"]
