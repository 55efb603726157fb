"""Decisions downstream of a ranking and how often presentation changes them.

* Threshold t*: tuned ONCE on the canonical presentation (shuffle 0) of the
  development half of the queries (presdep.metrics.thresholds), then frozen.
  Grid: 41 evenly spaced values over the pooled score range; objective: mean over
  queries of the set-F1 between the retained set S = {d : score(d) >= t} and the
  qrels-relevant docs (grade >= 1) within the pool; ties go to the higher
  threshold. A query with no relevant doc in its pool scores F1 = 0 whatever S is
  (the paper's rule; it cannot pull t* towards retaining nothing).
* Retained-set Jaccard: |S_a & S_b| / |S_a | S_b| averaged over all M(M-1)/2
  presentation pairs; two empty sets count as 1.
* Set flip rate: share of presentation pairs whose retained sets differ.
* Retained size: mean |S| over presentations.
* Retained-set quality per presentation: precision |S & R| / |S| (0 when S is
  empty), recall |S & R| / |R| and F1 2|S & R| / (|S| + |R|) (both 0 when R is
  empty), retention |S| / n.
* Matched-retention control: every presentation keeps exactly as many docs as the
  canonical presentation (presentation 0) does at t*, its top n by (-score,
  presented position); Jaccard and set flip of those sets remove the effect of
  scores crossing the threshold.
* Response pair flip: 1 - (count of the most common (top, bottom) pair) / M,
  selection flip: 1 - (count of the most common top) / M. Top and bottom come
  from the order (score descending, ties by response id ASCENDING): top is the
  first, bottom the last of that order.

Every pairwise or flip quantity is NaN for M < 2: one presentation says nothing
about presentation dependence.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Hashable, Sequence

import numpy as np

from presdep.contracts.errors import InvalidInput

N_GRID = 41
_TIE_EPS = 1e-12  # mean-F1 values closer than this are ties (summation rounding)


def threshold_grid(canonical_scores: Sequence[np.ndarray], n_grid: int = N_GRID) -> np.ndarray:
    """``n_grid`` evenly spaced values over the pooled score range."""
    if not len(canonical_scores):
        raise InvalidInput("no canonical scores to tune the threshold on")
    pooled = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in canonical_scores])
    if pooled.size == 0 or np.isnan(pooled).any():
        raise InvalidInput("canonical scores are empty or contain NaN")
    return np.linspace(pooled.min(), pooled.max(), n_grid)


def threshold_curve(
    canonical_scores: Sequence[np.ndarray], relevant: Sequence[np.ndarray], n_grid: int = N_GRID
) -> tuple[np.ndarray, np.ndarray]:
    """(grid, mean set-F1 at each grid value). ``relevant[i]`` is a bool mask aligned
    with ``canonical_scores[i]`` (1-D, one query's pool)."""
    if len(canonical_scores) != len(relevant):
        raise InvalidInput("canonical_scores and relevant must have one entry per query")
    grid = threshold_grid(canonical_scores, n_grid)
    sizes = np.array([np.size(s) for s in canonical_scores])
    if (sizes == 0).any():
        raise InvalidInput("a query has an empty pool")
    s = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in canonical_scores])
    rel = np.concatenate([np.asarray(r, dtype=bool).ravel() for r in relevant])
    if rel.shape != s.shape:
        raise InvalidInput("relevance masks must align with the scores")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n_rel = np.add.reduceat(rel.astype(np.int64), starts)
    mean_f1 = np.empty(grid.size)
    for g, t in enumerate(grid):  # one pass per grid value keeps memory at O(docs)
        kept = s >= t
        tp = np.add.reduceat((kept & rel).astype(np.int64), starts)
        denom = np.add.reduceat(kept.astype(np.int64), starts) + n_rel
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = np.where(n_rel == 0, 0.0, 2.0 * tp / np.maximum(denom, 1))
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
            raise InvalidInput(f"each block must be (M, n), got {shape}")
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


def selection_order(scores: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """(M, n) indices sorting each presentation by score descending, ties by id ascending."""
    s = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    if np.isnan(s).any():
        raise InvalidInput("scores contain NaN; a selection needs comparable scores")
    ids = list(doc_ids)
    if len(set(ids)) != len(ids):
        raise InvalidInput(f"response ids are not unique: {sorted(ids)}")
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    return np.lexsort((np.broadcast_to(id_rank, s.shape), -s), axis=-1)


def top_bottom(scores: np.ndarray, doc_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(top-scored, bottom-scored) response id per presentation of an (M, n) block."""
    order = selection_order(scores, doc_ids)
    ids = list(doc_ids)
    return [(ids[row[0]], ids[row[-1]]) for row in order.tolist()]


def pair_flip(scores: np.ndarray, doc_ids: Sequence[str]) -> float:
    """Response pair flip of one query."""
    return mode_flip(top_bottom(scores, doc_ids))


def selection_flip(scores: np.ndarray, doc_ids: Sequence[str]) -> float:
    """Selection flip (which response is on top) of one query."""
    return mode_flip([t for t, _ in top_bottom(scores, doc_ids)])


def selected_quality(scores: np.ndarray, doc_ids: Sequence[str], grades: Sequence[float]) -> np.ndarray:
    """(M,) grade of the selected (top) response of each presentation."""
    g = np.asarray(grades, dtype=np.float64)
    return g[selection_order(scores, doc_ids)[:, 0]]


def retained_quality(kept: np.ndarray, relevant: np.ndarray) -> dict[str, np.ndarray]:
    """Per presentation precision, recall, F1 and retention of kept (M, n) vs relevant (n,)."""
    kept = np.asarray(kept, dtype=bool)
    rel = np.asarray(relevant, dtype=bool)
    size = kept.sum(axis=1).astype(np.float64)
    tp = (kept & rel).sum(axis=1).astype(np.float64)
    n_rel = float(rel.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(size == 0, 0.0, tp / np.maximum(size, 1))
        recall = np.zeros_like(tp) if n_rel == 0 else tp / n_rel
        f1 = np.zeros_like(tp) if n_rel == 0 else 2.0 * tp / (size + n_rel)
    return {"precision": precision, "recall": recall, "f1": f1, "retention": size / kept.shape[1]}


def pair_stats(kept: np.ndarray) -> tuple[float, float]:
    """(mean pairwise Jaccard, set flip rate) of one query's kept (M, n) masks; NaN for M < 2."""
    kept = np.asarray(kept, dtype=bool)
    if kept.shape[0] < 2:
        return math.nan, math.nan
    j, f = _pair_stats(kept[None])
    return float(j[0]), float(f[0])


def matched_kept(scores: np.ndarray, positions: np.ndarray, n_keep: int) -> np.ndarray:
    """(M, n) masks: each presentation keeps its top ``n_keep`` by (-score, position)."""
    s = np.asarray(scores, dtype=np.float64)
    order = np.lexsort((np.asarray(positions), -s), axis=-1)
    kept = np.zeros(s.shape, dtype=bool)
    np.put_along_axis(kept, order[:, :n_keep], True, axis=-1)
    return kept
