"""Adaptive BSC: add shuffles to an ensemble until its decision settles.

A BSC variant's scores hold E*K raw shuffles (docs/methods/bsc.md); ensemble e uses
shuffles e*K .. (e+1)*K - 1. Adaptive BSC adds them to the ensemble one at a time, in
that stored order, recomputes the decision on the running mean after each addition,
and stops once the decision has not changed for ``r`` consecutive additions
(so at the earliest after r + 1 shuffles) or when the cap K is reached.

Decisions (docs/methods/bsc.md, "Adaptive BSC"):

* rerank: the retained set {d : mean score >= t*} at the fixed-K BSC's frozen t*
  (the threshold artifact's, tuned on ensemble 0 of the K-shuffle BSC scores), so
  adaptive and fixed K are compared at one threshold; test-half queries only, as
  every other t* metric.
* response: the selected (top) response, ties by response id ascending (decisions).
* qa: not covered: the reader's answer needs a re-read of every intermediate ensemble.

The fixed-K decision is the same rule on the mean of all K shuffles. Per r
(perturbation ``bsc_adaptive_r{r}``), aggregate rows over queries of the mean over
their E ensembles: shuffles_mean (shuffles used), shuffles_fixed (K), passes_saved
(1 - shuffles_mean / K), capped (share that reached the cap unsettled), agreement
(share of decisions equal to the fixed-K one; for a retained set, exact set
equality), for rerank jaccard_fixed (Jaccard of the adaptive and fixed-K retained
sets, two empty sets = 1) and t_star, and passes_per_query (E * shuffles_mean + 1,
the first-stage pass), comparable to the K-curve's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.views import RANDOM_SHUFFLE
from presdep.metrics import decisions

log = logging.getLogger(__name__)

ADAPTIVE_R = (1, 2, 3, 5)
COVERED_TASKS = ("rerank", "response")


def running_means(shuffles: np.ndarray) -> np.ndarray:
    """(K, n) raw shuffle scores -> (K, n): row k - 1 is the mean of the first k shuffles."""
    s = np.asarray(shuffles, dtype=np.float64)
    return np.cumsum(s, axis=0) / np.arange(1, s.shape[0] + 1)[:, None]


def stopping_point(decision_path: np.ndarray, r: int) -> tuple[int, bool]:
    """(shuffles used, settled) of an adaptive ensemble, given its decision after each of K additions.

    ``decision_path`` (K, ...): row k - 1 is the decision on the first k shuffles. The
    ensemble stops at the first k whose last ``r`` additions left the decision unchanged
    (settled); otherwise it uses all K (the cap, unsettled).
    """
    if r < 1:
        raise InvalidInput(f"adaptive BSC needs r >= 1 consecutive unchanged additions, got {r}")
    d = np.asarray(decision_path)
    d = d.reshape(d.shape[0], -1)
    unchanged = np.all(d[1:] == d[:-1], axis=1)  # unchanged[i]: adding shuffle i + 2 kept the decision
    run = 0
    for i, same in enumerate(unchanged):
        run = run + 1 if same else 0
        if run >= r:
            return i + 2, True
    return d.shape[0], False


def retained_path(shuffles: np.ndarray, t_star: float) -> np.ndarray:
    """(K, n) bool: the retained set at t* after each addition."""
    return decisions.retained(running_means(shuffles), t_star)


def selection_path(shuffles: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """(K,) index of the selected response after each addition (ties: response id ascending)."""
    return decisions.selection_order(running_means(shuffles), doc_ids)[:, 0]


@dataclass(frozen=True)
class AdaptiveOutcome:
    """One ensemble under adaptive BSC: shuffles used, and its decision against the fixed-K one."""

    shuffles: int
    capped: bool
    agrees: bool
    jaccard: float  # adaptive vs fixed-K retained set (rerank); NaN for a selection


def adaptive_outcome(decision_path: np.ndarray, r: int) -> AdaptiveOutcome:
    """Stop by :func:`stopping_point`; compare the decision there with the last row's (fixed K)."""
    path = np.asarray(decision_path)
    k, settled = stopping_point(path, r)
    got, fixed = path[k - 1], path[-1]
    jac = float("nan")
    if path.dtype == bool:
        union = int(np.sum(got | fixed))
        jac = 1.0 if union == 0 else int(np.sum(got & fixed)) / union
    return AdaptiveOutcome(shuffles=k, capped=not settled, agrees=bool(np.array_equal(got, fixed)), jaccard=jac)


def _shuffle_blocks(scores: pl.DataFrame, n_shuffles: int) -> Iterator[tuple[str, list[str], np.ndarray]]:
    """(query, doc ids, (n_shuffles, n) raw scores in stored shuffle order) per query."""
    v = scores.filter((pl.col("perturbation") == RANDOM_SHUFFLE) & (pl.col("presentation") < n_shuffles))
    v = v.sort("query_id", "presentation", "doc_id")
    for (q,), part in v.group_by(["query_id"], maintain_order=True):
        ids = part["doc_id"].to_list()
        docs = ids[: part.height // n_shuffles]
        # the reshape below needs every shuffle to score the same documents
        if part["presentation"].n_unique() != n_shuffles or ids != docs * n_shuffles:
            raise InvalidInput(f"adaptive BSC needs {RANDOM_SHUFFLE} presentations 0..{n_shuffles - 1} of every "
                               f"document of query {q!r}")
        yield q, docs, part["score"].to_numpy().reshape(n_shuffles, -1)


def ensemble_outcomes(
    scores: pl.DataFrame,
    *,
    task: str,
    bsc_k: int,
    ensembles: int,
    r: int,
    t_star: float | None = None,
    queries: set[str] | None = None,
) -> dict[str, list[AdaptiveOutcome]]:
    """Per query (those in ``queries``, or all), the adaptive outcome of each of its E ensembles."""
    decide = _decider(task, t_star)
    out: dict[str, list[AdaptiveOutcome]] = {}
    for q, docs, s in _shuffle_blocks(scores, bsc_k * ensembles):
        if queries is not None and q not in queries:
            continue
        out[q] = [adaptive_outcome(decide(s[e * bsc_k:(e + 1) * bsc_k], docs), r) for e in range(ensembles)]
    return out


def _decider(task: str, t_star: float | None) -> Callable[[np.ndarray, Sequence[str]], np.ndarray]:
    if task == "rerank":
        if t_star is None:
            raise InvalidInput("adaptive BSC for reranking needs the fixed-K t*")
        return lambda s, _docs: retained_path(s, t_star)
    if task == "response":
        return selection_path
    raise InvalidInput(f"adaptive BSC covers tasks {COVERED_TASKS}, not {task!r}")


def _query_mean(per_q: Mapping[str, Sequence[AdaptiveOutcome]], field: str) -> float:
    """Mean over queries of the mean over each query's ensembles (every query has E)."""
    return float(np.mean([np.mean([getattr(o, field) for o in outs]) for outs in per_q.values()]))


def adaptive_rows(
    scores: pl.DataFrame,
    *,
    task: str,
    bsc_k: int,
    ensembles: int,
    rs: Sequence[int] = ADAPTIVE_R,
    thresholds: Mapping[str, Any] | None = None,
) -> Iterator[tuple[str, str | None, str, float]]:
    """(perturbation, None, metric, value) aggregate rows of adaptive BSC, one perturbation per r."""
    if task not in COVERED_TASKS:
        log.info("adaptive BSC: task %r is not covered (its decision needs re-reading)", task)
        return
    if task == "rerank" and thresholds is None:
        log.info("adaptive BSC: no threshold artifact, no retained-set decision to compare")
        return
    t_star = float(thresholds["t_star"]) if task == "rerank" else None
    test = {str(q) for q in thresholds["test_queries"]} if task == "rerank" else None
    for r in sorted({int(x) for x in rs}):
        per_q = ensemble_outcomes(scores, task=task, bsc_k=bsc_k, ensembles=ensembles, r=r, t_star=t_star,
                                  queries=test)
        if not per_q:
            continue
        pert = f"bsc_adaptive_r{r}"
        used = _query_mean(per_q, "shuffles")
        yield pert, None, "shuffles_mean", used
        yield pert, None, "shuffles_fixed", float(bsc_k)
        yield pert, None, "passes_saved", 1.0 - used / bsc_k
        yield pert, None, "passes_per_query", ensembles * used + 1.0
        yield pert, None, "capped", _query_mean(per_q, "capped")
        yield pert, None, "agreement", _query_mean(per_q, "agrees")
        if task == "rerank":
            yield pert, None, "jaccard_fixed", _query_mean(per_q, "jaccard")
            yield pert, None, "t_star", t_star
