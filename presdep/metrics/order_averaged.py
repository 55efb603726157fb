"""Order-averaged quality: each document's mean score over the first K random shuffles, ranked.

The amortization terms of the contrasts (docs/methods/contrasts.md) compare a scorer's
single-pass quality (``ndcg10_shuffle_mean``, the K = 1 anchor) with what averaging its
scores over K = 10 shuffles recovers. Per query: the mean over the first min(K, M)
presentations of each document's score, ranked with ties by first-stage rank (the
document's position in the first-stage presentation; doc id where a query has none), then
nDCG@10 (responses: nDCG@1) by pytrec_eval. Metric ``ndcg{k}_order_averaged``, perturbation
``random_shuffle``; ``order_averaged_k`` says how many shuffles were averaged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from presdep.metrics.blocks import Block
from presdep.metrics.quality import evaluate_presentations
from presdep.metrics.rows import MetricRows

K_AVERAGED = 10


def first_stage_ranks(first: Sequence[Block]) -> dict[str, dict[str, int]]:
    """query -> {doc: its position in the first-stage presentation}."""
    out = {}
    for b in first:
        if b.positions is not None:
            out[b.query_id] = dict(zip(b.doc_ids, b.positions[0].tolist()))
    return out


def add_order_averaged_rows(rows: MetricRows, pert: str, bl: Sequence[Block], first: Mapping[str, Mapping[str, int]],
                            qrels_d: Mapping, task: str, k_averaged: int = K_AVERAGED) -> None:
    """Per query and aggregate ``ndcg{k}_order_averaged`` rows, and ``order_averaged_k``."""
    if not bl:
        return
    k = 1 if task == "response" else 10
    means, ties = [], []
    for b in bl:
        means.append(b.scores[:k_averaged].mean(axis=0, keepdims=True))
        ranks = first.get(b.query_id)
        order = (np.array([ranks.get(d, len(ranks)) for d in b.doc_ids]) if ranks
                 else np.argsort(np.argsort(b.doc_ids)))  # doc ids are ascending: their own order
        ties.append(order[None, :])
    nd = evaluate_presentations([b.query_id for b in bl], [b.doc_ids for b in bl], means, ties, qrels_d,
                                [f"ndcg@{k}"])[f"ndcg@{k}"]
    judged = [b.query_id for b in bl if b.query_id in nd]
    rows.per_query(pert, f"ndcg{k}_order_averaged", judged, [float(nd[q][0]) for q in judged])
    rows.add(pert, None, "order_averaged_k", float(min(k_averaged, min(b.scores.shape[0] for b in bl))))
