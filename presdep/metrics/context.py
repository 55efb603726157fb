"""Context-decomposition metrics: how much of a batched score's quality comes from width, from what
the companions say, from their mere presence and from the answer skeleton
(docs/methods/context-decomposition.md).

Each arm has two readings per query, one score per document: the canonical order's score
(perturbation ``context_canonical``) and the order-averaged one, each document's MEAN score over
the shuffles (``context_shuffled``). A1 is read once and serves both. Per reading, query and arm
the pool is ranked by score (ties by first-stage rank) and scored by nDCG@k through pytrec_eval:
one ranking per reading, never a mean of per-shuffle nDCG. The terms close exactly:
A2 - A1 = (A2 - A3) + (A3 - A4) + (A4 - A1).

* ``ndcg{k}_A1`` .. ``ndcg{k}_A4``;
* ``width`` = A2 - A1, ``companion_content`` = A2 - A3, ``companion_presence`` = A3 - A4,
  ``skeleton`` = A4 - A1 (screen mode: A1, A4 and ``skeleton`` only);
* ``score_<term>`` and ``score_<term>_abs``: the mean signed and absolute difference of the two
  arms' reading scores of the same document (canonical: the canonical scores; order-averaged:
  the per-document mean scores).

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
# One reading: (arm, query) -> (doc ids, their scores, their first-stage ranks)
Reading = dict[tuple[str, str], tuple[list[str], np.ndarray, np.ndarray]]


def arms_of(scores: pl.DataFrame) -> tuple[str, ...]:
    arms = tuple(sorted(scores["arm"].unique().to_list()))
    if arms not in (("A1", "A2", "A3", "A4"), ("A1", "A4")):
        raise InvalidInput(f"context scores hold arms {arms}; expected A1-A4 (full) or A1 and A4 (screen)")
    return arms


def terms_of(arms: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    return {t: ab for t, ab in TERMS.items() if set(ab) <= set(arms)}


def _check_single_reads(scores: pl.DataFrame) -> None:
    twice = scores.filter(pl.struct("arm", "presentation", "query_id", "doc_id").is_duplicated())
    if twice.height:
        r = twice.row(0, named=True)
        raise InvalidInput(f"context scores: query {r['query_id']!r} reads document {r['doc_id']!r} twice in arm "
                           f"{r['arm']}, presentation {r['presentation']}")


def canonical_reading(scores: pl.DataFrame) -> Reading:
    """Every arm's canonical-order scores (A1's one reading included)."""
    out: Reading = {}
    for (arm, qid), g in scores.filter(pl.col("presentation") == CANONICAL).group_by("arm", "query_id"):
        out[(str(arm), str(qid))] = (g["doc_id"].to_list(), g["score"].to_numpy().astype(np.float64),
                                     g["first_stage_rank"].to_numpy())
    return out


def order_averaged_reading(scores: pl.DataFrame) -> Reading:
    """Each document's mean score over the shuffles (presentations other than the canonical), per arm
    and query; A1, read once, keeps its one reading. Every shuffle must read the same documents."""
    out = canonical_reading(scores.filter(pl.col("arm") == "A1"))
    shuffled = scores.filter((pl.col("arm") != "A1") & (pl.col("presentation") != CANONICAL))
    for (arm, qid), g in shuffled.sort("presentation", "doc_id").group_by("arm", "query_id", maintain_order=True):
        shuffles, n = g["presentation"].n_unique(), g["doc_id"].n_unique()
        if g.height != shuffles * n:  # no document is read twice in a shuffle, so each then reads all n
            raise InvalidInput(f"context scores: arm {arm}, query {qid!r}: its {shuffles} shuffles do not all read "
                               f"its {n} documents; the order-averaged reading needs every document in every shuffle")
        mean = g["score"].to_numpy().astype(np.float64).reshape(shuffles, n).mean(axis=0)
        out[(str(arm), str(qid))] = (g["doc_id"].head(n).to_list(), mean, g["first_stage_rank"].to_numpy()[:n])
    return out


def reading_ndcg(reading: Reading, qrels: Mapping[str, Mapping[str, int]], k: int = DEFAULT_K
                 ) -> dict[str, dict[str, float]]:
    """{arm: {query: nDCG@k}} of each arm's one ranking per query: by score, ties by first-stage rank."""
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for (arm, qid), (docs, score, first_stage) in reading.items():
        runs.setdefault(arm, {})[qid] = dict(zip(docs, presented_ranks(score, first_stage).tolist()))
    return {arm: ndcg_runs(by_query, qrels, k) for arm, by_query in runs.items()}


def _score_differences(reading: Reading, a: str, b: str) -> dict[str, tuple[float, float]]:
    """{query: (mean signed, mean absolute)} of a - b over the documents both arms read."""
    out = {}
    for (arm, qid), (docs, score, _) in reading.items():
        if arm != a or (b, qid) not in reading:
            continue
        other_docs, other_score, _ = reading[(b, qid)]
        other = dict(zip(other_docs, other_score.tolist()))
        diff = np.array([s - other[d] for d, s in zip(docs, score.tolist()) if d in other])
        if diff.size:
            out[qid] = (float(diff.mean()), float(np.abs(diff).mean()))
    return out


def context_metrics(scores: pl.DataFrame, qrels: pl.DataFrame | Mapping[str, Mapping[str, int]], *, dataset: str,
                    variant: str, donors: Mapping[str, float | int | None] | None = None, seed: int | None = None,
                    task: str = "rerank", k: int = DEFAULT_K) -> pl.DataFrame:
    """The ``metrics`` contract's long rows (see the module doc for the names)."""
    missing = {"query_id", "doc_id", "arm", "presentation", "first_stage_rank", "score"} - set(scores.columns)
    if missing:
        raise InvalidInput(f"context scores lack column(s) {sorted(missing)}")
    qrels_d = qrels_to_dict(qrels) if isinstance(qrels, pl.DataFrame) else qrels
    arms = arms_of(scores)
    _check_single_reads(scores)
    readings = {CANONICAL_PERTURBATION: canonical_reading(scores),
                SHUFFLED_PERTURBATION: order_averaged_reading(scores)}
    ndcg = {pert: reading_ndcg(reading, qrels_d, k) for pert, reading in readings.items()}
    # every judged query of either reading; an arm without a reading of one is null there
    qids = sorted({q for by_arm in ndcg.values() for by_q in by_arm.values() for q in by_q})
    rows = MetricRows()
    for pert, reading in readings.items():
        value = {arm: np.array([ndcg[pert].get(arm, {}).get(q, math.nan) for q in qids]) for arm in arms}
        for arm in arms:
            rows.per_query(pert, f"ndcg{k}_{arm}", qids, value[arm])
        for term, (a, b) in terms_of(arms).items():
            rows.per_query(pert, term, qids, value[a] - value[b])
        for term, (a, b) in terms_of(arms).items():
            diff = _score_differences(reading, a, b)
            every = sorted(diff)
            rows.per_query(pert, f"score_{term}", every, [diff[q][0] for q in every])
            rows.per_query(pert, f"score_{term}_abs", every, [diff[q][1] for q in every])
    if donors and donors.get("companions"):
        for metric, key in (("length_error_mean", "mean"), ("length_error_p95", "p95"),
                            ("length_exact_share", "exact_share"), ("companions", "companions")):
            rows.add(DONORS_PERTURBATION, None, metric, donors.get(key))
    return rows.frame(dataset=dataset, variant=variant, seed=seed, task=task)


__all__ = ["CANONICAL_PERTURBATION", "DEFAULT_K", "DONORS_PERTURBATION", "SHUFFLED_PERTURBATION", "TERMS",
           "arms_of", "canonical_reading", "context_metrics", "order_averaged_reading", "reading_ndcg", "terms_of"]
