"""Zeng et al. PSI rows: nDCG bucketed by where the strongest relevant doc was presented."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from presdep.contracts.errors import InvalidInput
from presdep.metrics import instability
from presdep.metrics.blocks import Block, position_ranks
from presdep.metrics.rows import MetricRows

log = logging.getLogger(__name__)


def strongest_relevant(doc_ids: list[str], judged: Mapping[str, int]) -> int | None:
    """Index of the pool's strongest relevant doc: highest grade >= 1, ties by smallest doc id."""
    best: tuple[int, str] | None = None
    best_i = None
    for i, d in enumerate(doc_ids):
        g = judged.get(d, 0)
        if g >= 1 and (best is None or g > best[0] or (g == best[0] and d < best[1])):
            best, best_i = (g, d), i
    return best_i


def add_zeng_rows(rows: MetricRows, pert: str, bl: list[Block], ndcg: dict[str, np.ndarray], qrels_d) -> None:
    """Zeng et al. PSI: buckets by where the strongest relevant doc was presented."""
    if any(b.positions is None for b in bl):
        log.warning("%s: scores have no 'position' column; zeng_psi not computed", pert)
        return
    judged = [b for b in bl if b.query_id in ndcg]
    if not judged:
        return
    values = np.full(len(judged), np.nan)
    means = np.full((len(judged), instability.N_BUCKETS), np.nan)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, b in enumerate(judged):
        by_shape.setdefault(b.scores.shape, []).append(i)
    for (m, n), idx in by_shape.items():
        grades = np.array([[qrels_d[judged[i].query_id].get(d, 0) for d in judged[i].doc_ids] for i in idx])
        # Docs are in ascending id order, so argmax (first maximum) = highest grade, then
        # smallest doc id: the rule of strongest_relevant and of the presentations.
        strongest = grades.argmax(axis=1)
        has_rel = grades.max(axis=1) >= 1
        pos = position_ranks([judged[i] for i in idx])  # (Q, M, n)
        where = np.take_along_axis(pos, strongest[:, None, None], axis=2)[:, :, 0]  # (Q, M)
        if pert == "middle_injection" and n >= 3:
            expected = np.array([0, n // 2, n - 1])
            bad = has_rel & ~(
                (np.sort(where, axis=1) == expected).all(axis=1) if m == 3 else np.zeros(len(idx), bool)
            )
            if bad.any():
                r = int(np.flatnonzero(bad)[0])
                b = judged[idx[r]]
                raise InvalidInput(
                    f"middle_injection: query {b.query_id!r}: the strongest relevant doc "
                    f"{b.doc_ids[strongest[r]]!r} (highest grade, ties by smallest doc id) sits at "
                    f"positions {where[r].tolist()}, expected top, middle and bottom (0, {n // 2}, "
                    f"{n - 1}); the presentations and the metrics disagree on which doc was injected"
                )
        buckets = (instability.N_BUCKETS * where) // n
        nd = np.stack([ndcg[judged[i].query_id] for i in idx])  # (Q, M)
        for bkt in range(instability.N_BUCKETS):
            sel = buckets == bkt
            cnt = sel.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                means[idx, bkt] = np.where(cnt > 0, (nd * sel).sum(axis=1) / cnt, np.nan)
        # No relevant doc in the pool: nothing was placed, so the query counts as nDCG 0 in the
        # middle bucket (docs/methods/zeng-psi.md) and has no per-query value of its own.
        norel = np.array(idx)[~has_rel]
        means[norel] = np.nan
        means[norel, 1] = 0.0
    for i in range(len(judged)):
        values[i] = instability.zeng_from_bucket_means(means[i])
    rows.per_query(pert, "zeng_psi", [b.query_id for b in judged], values)
    rows.add(pert, None, "zeng_psi_corpus", instability.zeng_psi_corpus(means))
