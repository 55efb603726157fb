"""Ranking quality: nDCG@k through pytrec_eval with trec_eval semantics.

trec_eval uses the qrels grade as the gain (not 2^g - 1), discounts by
1/log2(rank + 1), and takes the ideal DCG from ALL judged documents of the query,
so relevant documents the first stage missed lower the score. It ignores the rank
column and sorts by score descending, then doc id DESCENDING (strcmp order). We
make that order explicit before evaluating: every ranking becomes strictly
decreasing scores n, n-1, ..., 1 in that order, so the result never depends on
how pytrec_eval happens to treat ties or on the input order.
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import numpy as np
import polars as pl
import pytrec_eval

from presdep.contracts.errors import InvalidInput
from presdep.data.guards import grade_error

log = logging.getLogger(__name__)

Qrels = Mapping[str, Mapping[str, int]]


def _id_rank(doc_ids: Sequence[str]) -> np.ndarray:
    """Rank of each doc id in ascending string order (Python order = UTF-8 byte order = strcmp)."""
    ids = np.asarray(doc_ids, dtype=object)
    order = sorted(range(len(ids)), key=ids.__getitem__)
    rank = np.empty(len(ids), dtype=np.int64)
    rank[order] = np.arange(len(ids))
    if len(set(ids.tolist())) != len(ids):
        raise InvalidInput(f"doc ids are not unique: {sorted(ids.tolist())}")
    return rank


def trec_order(scores: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """Indices that sort the docs the trec_eval way: score descending, then doc id descending.

    ``scores`` has shape (..., n) (one row per presentation); the result has the same shape.
    """
    s = np.asarray(scores, dtype=np.float64)
    if np.isnan(s).any():
        raise InvalidInput("scores contain NaN; a ranking needs comparable scores")
    idr = np.broadcast_to(_id_rank(doc_ids), s.shape)
    # lexsort: last key is primary.
    return np.lexsort((-idr, -s), axis=-1)


def _descending_along(order: np.ndarray) -> np.ndarray:
    """Scores n..1 laid along ``order`` (..., n): n for the doc at order[..., 0], 1 for the last."""
    n = order.shape[-1]
    out = np.empty(order.shape, dtype=np.float64)
    np.put_along_axis(out, order, np.broadcast_to(np.arange(n, 0, -1, dtype=np.float64), order.shape), axis=-1)
    return out


def strict_scores(scores: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """Strictly decreasing scores (n for the first doc in trec_eval order ... 1 for the last)."""
    return _descending_along(trec_order(np.asarray(scores, dtype=np.float64), doc_ids))


def qrels_to_dict(qrels: pl.DataFrame) -> dict[str, dict[str, int]]:
    """A ``qrels`` table (query_id, doc_id, relevance) as pytrec_eval's nested dict."""
    missing = {"query_id", "doc_id", "relevance"} - set(qrels.columns)
    if missing:
        raise InvalidInput(f"qrels lacks column(s) {sorted(missing)}; expected query_id, doc_id, relevance")
    out: dict[str, dict[str, int]] = {}
    for q, d, r in zip(
        qrels["query_id"].cast(pl.String).to_list(),
        qrels["doc_id"].cast(pl.String).to_list(),
        qrels["relevance"].to_list(),
    ):
        if r is None:
            raise InvalidInput(f"qrels: query {q!r} doc {d!r} has a null relevance")
        inner = out.setdefault(q, {})
        if d in inner:
            raise InvalidInput(f"qrels: query {q!r} judges doc {d!r} twice")
        inner[d] = int(r)
    return out


def relevance_evaluator(qrels: Qrels, measures: set[str]) -> pytrec_eval.RelevanceEvaluator:
    """pytrec_eval's evaluator over ``qrels``, once every grade is one it can hold: trec_eval's
    memory grows with the highest grade (presdep.data.guards.MAX_GRADE), whatever path the
    qrels came by."""
    for q, judged in qrels.items():
        for d, grade in judged.items():
            reason = grade_error(int(grade))
            if reason is not None:
                raise InvalidInput(f"qrels: query {q!r} doc {d!r}: {reason}")
    return pytrec_eval.RelevanceEvaluator({q: dict(v) for q, v in qrels.items()}, measures)


def _measure(k: int) -> tuple[str, str]:
    if k < 1:
        raise InvalidInput(f"nDCG cut-off must be >= 1, got {k}")
    return f"ndcg_cut.{k}", f"ndcg_cut_{k}"


def ndcg_runs(runs: Mapping[str, Mapping[str, float]], qrels: Qrels, k: int = 10) -> dict[str, float]:
    """nDCG@k of each query of ONE run ({query: {doc: score}}), ties made explicit first.

    Queries absent from ``qrels`` are left out (trec_eval convention).
    """
    measure, key = _measure(k)
    evaluator = relevance_evaluator(qrels, {measure})
    run: dict[str, dict[str, float]] = {}
    for q, docs in runs.items():
        if q not in qrels:
            continue
        ids = list(docs)
        run[q] = dict(zip(ids, strict_scores(np.fromiter(docs.values(), float, len(ids)), ids).tolist()))
    res = evaluator.evaluate(run)
    return {q: float(v[key]) for q, v in res.items()}


def ndcg_presentations(
    query_ids: Sequence[str],
    doc_ids: Sequence[Sequence[str]],
    scores: Sequence[np.ndarray],
    qrels: Qrels,
    k: int = 10,
    *,
    ids_sorted: bool = False,
) -> dict[str, np.ndarray]:
    """Per-presentation nDCG@k for many queries at once.

    ``scores[i]`` is an (M_i, n_i) array aligned with ``doc_ids[i]`` (one row per
    presentation). Returns {query: array of M_i nDCG values}; queries absent from
    ``qrels`` are skipped (their count is logged). One evaluator is built and run
    once per presentation ordinal (the m-th presentation of every query).

    Only the top k docs of each ranking (in trec_eval order, as strictly decreasing
    scores) are handed to pytrec_eval: nDCG@k reads nothing below rank k and takes
    its ideal DCG from the qrels, so the value is identical and the call far cheaper.
    ``ids_sorted=True`` promises every ``doc_ids[i]`` is in ascending order (skips a check).
    """
    measure, key = _measure(k)
    judged = [i for i, q in enumerate(query_ids) if q in qrels]
    skipped = len(query_ids) - len(judged)
    if skipped:
        log.info("nDCG@%d: %d of %d queries have no qrels and are skipped", k, skipped, len(query_ids))
    if not judged:
        return {}
    qsub = {query_ids[i]: dict(qrels[query_ids[i]]) for i in judged}
    evaluator = relevance_evaluator(qsub, {measure})
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i in judged:
        by_shape.setdefault(np.shape(scores[i]), []).append(i)
    max_m = max(shape[0] for shape in by_shape)
    runs: list[dict[str, dict[str, float]]] = [{} for _ in range(max_m)]
    for (m, n), idx in by_shape.items():
        s = np.stack([np.asarray(scores[i], dtype=np.float64) for i in idx])
        if np.isnan(s).any():
            raise InvalidInput("scores contain NaN; a ranking needs comparable scores")
        if ids_sorted:
            idr = np.broadcast_to(np.arange(n), (len(idx), n))
        else:
            idr = np.stack([_id_rank_fast(doc_ids[i]) for i in idx])  # (Q, n)
        order = np.lexsort((np.broadcast_to(-idr[:, None, :], s.shape), -s), axis=-1)[..., :k]
        strict = np.arange(n, n - order.shape[-1], -1, dtype=np.float64).tolist()
        for row, i in enumerate(idx):
            ids = doc_ids[i]
            for mm in range(m):
                runs[mm][query_ids[i]] = {ids[j]: v for j, v in zip(order[row, mm].tolist(), strict)}
    out = {query_ids[i]: np.full(np.shape(scores[i])[0], np.nan) for i in judged}
    for m, run in enumerate(runs):
        for q, v in evaluator.evaluate(run).items():
            out[q][m] = float(v[key])
    return out


def _id_rank_fast(doc_ids: Sequence[str]) -> np.ndarray:
    """``_id_rank`` with a shortcut for ids already in ascending order (as compute passes them)."""
    ids = list(doc_ids)
    if all(a < b for a, b in zip(ids, ids[1:])):
        return np.arange(len(ids))
    return _id_rank(ids)


def presented_order(scores: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Indices sorting each row by score descending, ties by presented position (first shown wins).

    This is the paper's strict ranking: every output ranking, quality and instability
    alike, is read in this order. ``scores`` and ``positions`` are (..., n).
    """
    s = np.asarray(scores, dtype=np.float64)
    p = np.asarray(positions)
    if s.shape != p.shape:
        raise InvalidInput(f"scores {s.shape} and positions {p.shape} must align")
    if np.isnan(s).any():
        raise InvalidInput("scores contain NaN; a ranking needs comparable scores")
    return np.lexsort((p, -s), axis=-1)


def presented_ranks(scores: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Strict scores n..1 in ``presented_order`` (n for the top): a tie-free stand-in."""
    return _descending_along(presented_order(np.asarray(scores, dtype=np.float64), positions))


# Measure names of the metrics table -> pytrec_eval measure (request, result key).
MEASURES = {
    "ndcg@1": ("ndcg_cut.1", "ndcg_cut_1"),
    "ndcg@5": ("ndcg_cut.5", "ndcg_cut_5"),
    "ndcg@10": ("ndcg_cut.10", "ndcg_cut_10"),
    "map": ("map", "map"),
    "mrr": ("recip_rank", "recip_rank"),
    "recall@2": ("recall.2", "recall_2"),
    "recall@5": ("recall.5", "recall_5"),
}


def evaluate_presentations(
    query_ids: Sequence[str],
    doc_ids: Sequence[Sequence[str]],
    scores: Sequence[np.ndarray],
    positions: Sequence[np.ndarray],
    qrels: Qrels,
    measures: Sequence[str],
) -> dict[str, dict[str, np.ndarray]]:
    """{measure: {query: (M,) values}} with ties broken by presented position.

    Each ranking is handed to pytrec_eval as strictly decreasing scores in
    ``presented_order``, so trec_eval's own tie rule (doc id) never applies.
    Queries without qrels are skipped (trec_eval convention; the count is logged).
    """
    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise InvalidInput(f"unknown measure(s) {unknown}; known: {sorted(MEASURES)}")
    judged = [i for i, q in enumerate(query_ids) if q in qrels]
    if len(judged) < len(query_ids):
        log.info("%d of %d queries have no qrels and are skipped", len(query_ids) - len(judged), len(query_ids))
    out: dict[str, dict[str, np.ndarray]] = {m: {} for m in measures}
    if not judged:
        return out
    evaluator = relevance_evaluator({query_ids[i]: qrels[query_ids[i]] for i in judged},
                                    {MEASURES[m][0] for m in measures})
    max_m = max(np.shape(scores[i])[0] for i in judged)
    runs: list[dict[str, dict[str, float]]] = [{} for _ in range(max_m)]
    for i in judged:
        strict = presented_ranks(scores[i], positions[i])
        ids = list(doc_ids[i])
        for mm, row in enumerate(strict.tolist()):
            runs[mm][query_ids[i]] = dict(zip(ids, row))
        for m in measures:
            out[m][query_ids[i]] = np.full(strict.shape[0], np.nan)
    for mm, run in enumerate(runs):
        for q, v in evaluator.evaluate(run).items():
            for m in measures:
                out[m][q][mm] = float(v[MEASURES[m][1]])
    return out
