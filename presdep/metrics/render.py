"""Render-perturbation metrics (docs/methods/render-perturbations.md): how much one scorer's
decisions move when the prompt's surface changes and the order does not.

The reads follow the ``scores`` contract (:mod:`presdep.scoring.render_run`): each kind is a
perturbation whose presentations are its variants (0 canonical). So every metric a score file's
perturbation gets comes from :func:`presdep.metrics.compute.compute_metrics` unchanged and is
never mixed with order's: ``tau_psi``, ``ndcg10_shuffle_mean/worst/best`` (over the variants),
and on reranking the retained-set decisions at the run's frozen t* (``jaccard``, ``set_flip``,
...). Added here, per kind:

* ``zeng_psi``: Zeng et al.'s PSI with each variant its own bucket (the strongest relevant
  document never moves, so position buckets would hold one bucket): 1 - min_v nDCG@10_v /
  max_v nDCG@10_v per query; ``zeng_psi_corpus`` the same on the variants' means over queries;
* ``ndcg10_variant_spread``: best - worst variant nDCG@10 per query;
* ``ndcg10_variant{v}`` (aggregate only): variant v's mean nDCG@10 over judged queries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.render_variants import KINDS, VARIANTS
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import decision_presentations
from presdep.metrics import instability, quality
from presdep.metrics.blocks import build_blocks
from presdep.metrics.compute import compute_metrics
from presdep.metrics.rows import MetricRows

K = 10


def _variant_rows(rows: MetricRows, scores: pl.DataFrame, kind: str, qrels_d: Mapping) -> None:
    bl = build_blocks(decision_presentations(scores, perturbation=kind).with_columns(
        pl.lit(kind).alias("perturbation"))).get(kind, [])
    nd = quality.evaluate_presentations([b.query_id for b in bl], [b.doc_ids for b in bl], [b.scores for b in bl],
                                        [b.positions for b in bl], qrels_d, [f"ndcg@{K}"])[f"ndcg@{K}"]
    judged = [b.query_id for b in bl if b.query_id in nd]
    if not judged:
        return
    for b in bl:
        if b.query_id in nd and len(nd[b.query_id]) != VARIANTS:
            raise InvalidInput(f"render scores: query {b.query_id!r} has {len(nd[b.query_id])} variants of {kind}, "
                               f"expected {VARIANTS}")
    table = np.stack([nd[q] for q in judged])  # (queries, variants)
    rows.per_query(kind, "zeng_psi", judged, [instability.zeng_from_bucket_means(r) for r in table])
    rows.add(kind, None, "zeng_psi_corpus", instability.zeng_psi_corpus(table, VARIANTS))
    rows.per_query(kind, f"ndcg{K}_variant_spread", judged, table.max(axis=1) - table.min(axis=1))
    for v in range(VARIANTS):
        rows.add(kind, None, f"ndcg{K}_variant{v}", float(table[:, v].mean()))


def render_metrics(scores: pl.DataFrame, qrels: pl.DataFrame, *, dataset: str, variant: str,
                   thresholds: Mapping[str, Any] | None, task: str = "rerank", seed: int | None = None) -> pl.DataFrame:
    """The ``metrics`` rows of every render kind in ``scores`` (and the canonical prompt's quality
    cells under ``first_stage``); ``thresholds`` is the run's artifact (reranking's frozen t*)."""
    kinds = sorted(set(scores["perturbation"].unique().to_list()) - {FIRST_STAGE})
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise InvalidInput(f"render scores hold perturbation(s) {unknown}; expected render kinds {KINDS}")
    base = compute_metrics(scores, qrels, dataset=dataset, task=task, variant=variant, seed=seed,
                           thresholds=thresholds, zeng=False)
    base = base.filter(pl.col("perturbation").is_in([FIRST_STAGE, *kinds]))
    rows = MetricRows()
    qrels_d = quality.qrels_to_dict(qrels)
    for kind in kinds:
        _variant_rows(rows, scores, kind, qrels_d)
    return pl.concat([base, rows.frame(dataset=dataset, variant=variant, seed=seed, task=task)])


__all__ = ["render_metrics"]
