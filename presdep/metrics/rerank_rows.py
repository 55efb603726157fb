"""Reranking rows: retained-set metrics at the frozen threshold t* and the threshold's own rows."""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

import numpy as np

from presdep.contracts.views import RANDOM_SHUFFLE
from presdep.metrics import decisions
from presdep.metrics.blocks import Block
from presdep.metrics.rows import MetricRows

log = logging.getLogger(__name__)


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


def add_threshold_rows(rows: MetricRows, thr: Mapping[str, Any], bl: list[Block], qrels_d, test_q: set[str]) -> None:
    """t* and the degenerate-threshold flags (1 = raised), counted on the test half."""
    t = float(thr["t_star"])
    rows.add(RANDOM_SHUFFLE, None, "t_star", t)
    test = [b for b in bl if b.query_id in test_q]
    kept = np.concatenate([(b.scores >= t).ravel() for b in test]) if test else np.zeros(0, bool)
    rows.add(RANDOM_SHUFFLE, None, "warn_threshold_keeps_all", float(kept.size > 0 and kept.all()))
    rows.add(RANDOM_SHUFFLE, None, "warn_threshold_keeps_none", float(kept.size > 0 and not kept.any()))
    rows.add(RANDOM_SHUFFLE, None, "warn_single_presentation", float(sum(b.scores.shape[0] < 2 for b in bl)))
    no_rel = sum(not any(qrels_d.get(b.query_id, {}).get(d, 0) >= 1 for d in b.doc_ids) for b in bl)
    rows.add(RANDOM_SHUFFLE, None, "warn_queries_without_relevant", float(no_rel))
    for name, flag in (("keeps every candidate", kept.size > 0 and kept.all()),
                       ("keeps no candidate", kept.size > 0 and not kept.any())):
        if flag:
            log.warning("degenerate threshold: t* = %.6g %s on the test half", t, name)
    if no_rel:
        log.warning("%d queries have no relevant document in their pool (F1 0)", no_rel)
