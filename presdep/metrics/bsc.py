"""The BSC K-curve: BSC over the first K shuffles of each ensemble, K in {1, 2, 3, 5, 10}.

A BSC variant's scores hold E*K_max raw shuffles; ensemble e of the configured BSC
uses shuffles e*K_max .. (e+1)*K_max - 1. For a smaller K the curve's ensemble e
is the FIRST K of those, so ensemble 0 is "BSC over the first K shuffles" and the
E ensembles stay disjoint. Per K (perturbation ``bsc_curve_k{K}``): the task's
quality measure (nDCG@10, nDCG@1 for responses) of ensemble 0, tau_psi and
tau_psi_b between the E ensembles, and for reranking the Jaccard at a t* tuned on
these BSC scores (dev half of the frozen split, canonical = ensemble 0) and
reported on the test half. Passes per query to measure it: E*K (+1 first stage).
Beside the curve, adaptive BSC (presdep.metrics.bsc_adaptive, perturbations
``bsc_adaptive_r{r}``): shuffles added until the decision settles, against fixed K.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.views import CANONICAL_PRESENTATION, RANDOM_SHUFFLE, decision_presentations
from presdep.metrics import decisions, instability, quality
from presdep.metrics.bsc_adaptive import ADAPTIVE_R, adaptive_rows


def curve_scores(scores: pl.DataFrame, bsc_k: int, k: int) -> pl.DataFrame:
    """The raw shuffles a K-ensemble BSC uses, renumbered 0..E*k-1 (first-stage rows kept)."""
    if not 1 <= k <= bsc_k:
        raise InvalidInput(f"curve K must be in 1..{bsc_k}, got {k}")
    p = pl.col("presentation")
    shuffles = scores.filter((pl.col("perturbation") == RANDOM_SHUFFLE) & (p % bsc_k < k)).with_columns(
        ((p // bsc_k) * k + p % bsc_k).cast(pl.Int32).alias("presentation")
    )
    return pl.concat([scores.filter(pl.col("perturbation") != RANDOM_SHUFFLE), shuffles], how="vertical_relaxed")


def _matrix(view: pl.DataFrame) -> Iterator[tuple[str, list[str], np.ndarray, np.ndarray]]:
    v = view.sort("query_id", "presentation", "doc_id")
    for (q,), part in v.group_by(["query_id"], maintain_order=True):
        m = part["presentation"].n_unique()
        docs = part["doc_id"].to_list()[: part.height // m]
        yield q, docs, part["score"].to_numpy().reshape(m, -1), part["position"].to_numpy().reshape(m, -1)


def curve_rows(
    scores: pl.DataFrame,
    qrels: pl.DataFrame,
    *,
    task: str,
    bsc_k: int,
    ensembles: int,
    ks: Sequence[int],
    thresholds: Mapping[str, Any] | None,
    adaptive_r: Sequence[int] = ADAPTIVE_R,
) -> Iterator[tuple[str, str | None, str, float]]:
    """(perturbation, None, metric, value) aggregate rows of the K-curve (mean over queries),
    then adaptive BSC's for each r of ``adaptive_r`` (cap K = ``bsc_k``, the fixed-K t*)."""
    qrels_d = quality.qrels_to_dict(qrels)
    qual = "ndcg@1" if task == "response" else "ndcg@10"
    for k in sorted(set(int(x) for x in ks if x <= bsc_k)):
        pert = f"bsc_curve_k{k}"
        view = decision_presentations(curve_scores(scores, bsc_k, k), bsc_k=k, ensembles=ensembles)
        blocks = list(_matrix(view))
        qids = [b[0] for b in blocks]
        res = quality.evaluate_presentations(
            qids, [b[1] for b in blocks], [b[2] for b in blocks], [b[3] for b in blocks], qrels_d, [qual]
        )[qual]
        if res:
            yield pert, None, qual, float(np.mean([v[CANONICAL_PRESENTATION] for v in res.values()]))
        strict = [quality.presented_ranks(b[2], b[3]) for b in blocks]
        yield pert, None, "tau_psi", float(np.nanmean(instability.tau_psi_many(strict)))
        yield pert, None, "tau_psi_b", float(np.nanmean(instability.tau_psi_many([b[2] for b in blocks])))
        yield pert, None, "passes_per_query", float(ensembles * k + 1)
        if task == "rerank" and thresholds is not None:
            dev = set(thresholds["dev_queries"])
            test = set(thresholds["test_queries"])
            rel = {b[0]: np.array([qrels_d.get(b[0], {}).get(d, 0) >= 1 for d in b[1]]) for b in blocks}
            d_blocks = [b for b in blocks if b[0] in dev]
            grid = decisions.threshold_grid([b[2][CANONICAL_PRESENTATION] for b in blocks])  # all queries
            t_star = decisions.tune_threshold([b[2][CANONICAL_PRESENTATION] for b in d_blocks],
                                              [rel[b[0]] for b in d_blocks], grid=grid)
            jac = [decisions.pair_stats(b[2] >= t_star)[0] for b in blocks if b[0] in test]
            yield pert, None, "t_star", t_star
            yield pert, None, "jaccard", float(np.nanmean(jac)) if jac else float("nan")
    yield from adaptive_rows(scores, task=task, bsc_k=bsc_k, ensembles=ensembles, rs=adaptive_r,
                             thresholds=thresholds)
