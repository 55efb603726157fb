"""Decisions downstream of a ranking and how often presentation changes them.

* Threshold t*: tuned ONCE on the canonical presentation (first-stage order), then
  frozen. Grid: 41 evenly spaced values over the pooled score range of all
  queries; objective: mean over queries of the set-F1 between the retained set
  S = {d : score(d) >= t} and the qrels-relevant docs (grade >= 1) within the
  pool; ties go to the higher threshold. A query with no relevant doc in its pool
  scores F1 = 1 when S is empty and 0 otherwise (the empty set is then the right
  answer, mirroring "two empty sets count as 1" of the Jaccard).
* Retained-set Jaccard: |S_a & S_b| / |S_a | S_b| averaged over all M(M-1)/2
  presentation pairs; two empty sets count as 1.
* Set flip rate: share of presentation pairs whose retained sets differ.
* Retained size: mean |S| over presentations.
* Response pair flip: 1 - (count of the most common (top, bottom) pair) / M,
  selection flip: 1 - (count of the most common top) / M. Top and bottom come
  from the same total order as nDCG (score descending, ties by doc id descending,
  trec_eval's order), so the top of a tie is the largest doc id.

Every pairwise or flip quantity is NaN for M < 2: one presentation says nothing
about presentation dependence.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Hashable, Sequence

import numpy as np

from presdep.metrics.quality import trec_order

N_GRID = 41
_TIE_EPS = 1e-12  # mean-F1 values closer than this are ties (summation rounding)


def threshold_grid(canonical_scores: Sequence[np.ndarray], n_grid: int = N_GRID) -> np.ndarray:
    """``n_grid`` evenly spaced values over the pooled score range."""
    if not len(canonical_scores):
        raise ValueError("no canonical scores to tune the threshold on")
    pooled = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in canonical_scores])
    if pooled.size == 0 or np.isnan(pooled).any():
        raise ValueError("canonical scores are empty or contain NaN")
    return np.linspace(pooled.min(), pooled.max(), n_grid)


def threshold_curve(
    canonical_scores: Sequence[np.ndarray], relevant: Sequence[np.ndarray], n_grid: int = N_GRID
) -> tuple[np.ndarray, np.ndarray]:
    """(grid, mean set-F1 at each grid value). ``relevant[i]`` is a bool mask aligned
    with ``canonical_scores[i]`` (1-D, one query's pool)."""
    if len(canonical_scores) != len(relevant):
        raise ValueError("canonical_scores and relevant must have one entry per query")
    grid = threshold_grid(canonical_scores, n_grid)
    sizes = np.array([np.size(s) for s in canonical_scores])
    if (sizes == 0).any():
        raise ValueError("a query has an empty pool")
    s = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in canonical_scores])
    rel = np.concatenate([np.asarray(r, dtype=bool).ravel() for r in relevant])
    if rel.shape != s.shape:
        raise ValueError("relevance masks must align with the scores")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n_rel = np.add.reduceat(rel.astype(np.int64), starts)
    mean_f1 = np.empty(grid.size)
    for g, t in enumerate(grid):  # one pass per grid value keeps memory at O(docs)
        kept = s >= t
        tp = np.add.reduceat((kept & rel).astype(np.int64), starts)
        denom = np.add.reduceat(kept.astype(np.int64), starts) + n_rel
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = np.where(denom == 0, 1.0, 2.0 * tp / denom)
        mean_f1[g] = f1.mean()
    return grid, mean_f1


def tune_threshold(
    canonical_scores: Sequence[np.ndarray], relevant: Sequence[np.ndarray], n_grid: int = N_GRID
) -> float:
    """t* maximising mean set-F1 on the canonical presentation; ties to the higher value."""
    grid, f1 = threshold_curve(canonical_scores, relevant, n_grid)
    best = np.flatnonzero(f1 >= f1.max() - _TIE_EPS)
    return float(grid[best.max()])


def retained(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Mask of S = {d : score(d) >= t}."""
    return np.asarray(scores, dtype=np.float64) >= threshold


def _pair_stats(kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """kept (Q, M, n) bool -> (mean Jaccard, set flip rate), each (Q,)."""
    k = kept.astype(np.float64)
    inter = k @ k.transpose(0, 2, 1)
    size = np.diagonal(inter, axis1=1, axis2=2)
    union = size[:, :, None] + size[:, None, :] - inter
    a, b = np.triu_indices(kept.shape[1], 1)
    i, u = inter[:, a, b], union[:, a, b]
    with np.errstate(invalid="ignore", divide="ignore"):
        jac = np.where(u == 0, 1.0, i / u)
    return jac.mean(axis=1), (i != u).mean(axis=1)


def set_stats(scores: np.ndarray, threshold: float) -> tuple[float, float, float]:
    """(mean pairwise Jaccard, set flip rate, mean retained size) of one query's (M, n) scores."""
    j, f, s = set_stats_many([np.asarray(scores)], threshold)
    return float(j[0]), float(f[0]), float(s[0])


def set_stats_many(
    blocks: Sequence[np.ndarray], threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised ``set_stats`` over queries; queries of equal (M, n) are batched."""
    jac = np.full(len(blocks), np.nan)
    flip = np.full(len(blocks), np.nan)
    size = np.full(len(blocks), np.nan)
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, b in enumerate(blocks):
        by_shape.setdefault(np.shape(b), []).append(i)
    for shape, idx in by_shape.items():
        if len(shape) != 2:
            raise ValueError(f"each block must be (M, n), got {shape}")
        kept = retained(np.stack([np.asarray(blocks[i]) for i in idx]), threshold)
        size[idx] = kept.sum(axis=2).mean(axis=1)
        if shape[0] >= 2:
            jac[idx], flip[idx] = _pair_stats(kept)
    return jac, flip, size


def mode_flip(labels: Sequence[Hashable]) -> float:
    """1 - (count of the most common label) / M; NaN for M < 2."""
    m = len(labels)
    if m < 2:
        return math.nan
    return 1.0 - Counter(labels).most_common(1)[0][1] / m


def top_bottom(scores: np.ndarray, doc_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(top-scored, bottom-scored) doc id per presentation of an (M, n) block, trec_eval order."""
    order = trec_order(np.atleast_2d(scores), doc_ids)
    ids = list(doc_ids)
    return [(ids[row[0]], ids[row[-1]]) for row in order.tolist()]


def pair_flip(scores: np.ndarray, doc_ids: Sequence[str]) -> float:
    """Response pair flip of one query."""
    return mode_flip(top_bottom(scores, doc_ids))


def selection_flip(scores: np.ndarray, doc_ids: Sequence[str]) -> float:
    """Selection flip (which doc is on top) of one query."""
    return mode_flip([t for t, _ in top_bottom(scores, doc_ids)])
