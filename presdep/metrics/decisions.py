"""Decisions downstream of a ranking and how often presentation changes them.

* Threshold t*: tuned ONCE on the canonical presentation (shuffle 0) of the
  development half of the queries (presdep.metrics.thresholds), then frozen.
  Grid: 41 evenly spaced values from min to max of the canonical scores of ALL
  the dataset's queries (the caller passes that grid; development and test alike);
  objective: mean over the development queries of the set-F1 between the retained
  set S = {d : score(d) >= t} and the qrels-relevant docs (grade >= 1) within the
  pool, computed as 2PR / (P + R) from precision and recall. Ties in mean F1 are
  exact, no tolerance: walking the grid upwards, a value >= the best so far takes
  over, so the higher threshold wins. A query with no
  relevant doc in its pool scores F1 = 0 whatever S is (the paper's rule; it
  cannot pull t* towards retaining nothing).
* Retained-set Jaccard: |S_a & S_b| / |S_a | S_b| averaged over all M(M-1)/2
  presentation pairs; two empty sets count as 1.
* Set flip rate: with U = the docs retained in at least one presentation, the
  share of U whose membership is not the same in every presentation
  (= 1 - |S_0 & ... & S_{M-1}| / |U|). U empty (nothing was ever retained, so no
  membership changed) -> 0.
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
* Selected quality: the selected (top) response's grade divided by the prompt's
  maximum grade; undefined (NaN) when that maximum is 0 (no response is good, so
  no choice is better than another).

Every pairwise or flip quantity is NaN for M < 2: one presentation says nothing
about presentation dependence.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np

from presdep.contracts.errors import InvalidInput

N_GRID = 41


def threshold_grid(canonical_scores: Sequence[np.ndarray], n_grid: int = N_GRID) -> np.ndarray:
    """``n_grid`` evenly spaced values from min to max of the pooled scores given.

    The protocol pools the canonical scores of ALL the dataset's queries (development
    and test), not only those t* is tuned on.
    """
    if not len(canonical_scores):
        raise InvalidInput("no canonical scores to tune the threshold on")
    pooled = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in canonical_scores])
    if pooled.size == 0 or np.isnan(pooled).any():
        raise InvalidInput("canonical scores are empty or contain NaN")
    return np.linspace(pooled.min(), pooled.max(), n_grid)


def threshold_curve(
    canonical_scores: Sequence[np.ndarray],
    relevant: Sequence[np.ndarray],
    n_grid: int = N_GRID,
    *,
    grid: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(grid, mean set-F1 of the given queries at each grid value). ``relevant[i]`` is a
    bool mask aligned with ``canonical_scores[i]`` (1-D, one query's pool).

    ``grid``: the threshold values, ascending (the protocol's: ``threshold_grid`` over
    the canonical scores of ALL the dataset's queries). None: ``threshold_grid`` over
    ``canonical_scores`` themselves (right only when they are all the queries).
    """
    if len(canonical_scores) != len(relevant):
        raise InvalidInput("canonical_scores and relevant must have one entry per query")
    if grid is None:
        grid = threshold_grid(canonical_scores, n_grid)
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or np.isnan(grid).any() or (np.diff(grid) < 0).any():
        raise InvalidInput("the threshold grid must be a non-empty ascending 1-D array without NaN")
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
        size = np.add.reduceat(kept.astype(np.int64), starts)
        # F1 = 2PR / (P + R) from P and R, in the paper's order of operations: ties in mean F1
        # are exact, so the last bit decides them (2tp / (|S| + |R|) can differ in it).
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(size > 0, tp / np.maximum(size, 1), 0.0)
            r = np.where(n_rel > 0, tp / np.maximum(n_rel, 1), 0.0)
            f1 = np.where(p + r > 0, 2.0 * p * r / (p + r), 0.0)
        mean_f1[g] = f1.mean()
    return grid, mean_f1


def best_grid_index(mean_f1: Sequence[float]) -> int:
    """Index of t* on an ascending grid: walking upwards, a mean F1 >= the best so far
    takes over, so exact ties go to the higher threshold; no tolerance (values 1e-15
    apart are not tied)."""
    f1 = np.asarray(mean_f1, dtype=np.float64)
    if f1.ndim != 1 or f1.size == 0 or np.isnan(f1).any():
        raise InvalidInput("mean F1 must be a non-empty 1-D array without NaN")
    best_i, best = 0, -math.inf
    for i, v in enumerate(f1.tolist()):
        if v >= best:
            best_i, best = i, v
    return best_i


def tune_threshold(
    canonical_scores: Sequence[np.ndarray],
    relevant: Sequence[np.ndarray],
    n_grid: int = N_GRID,
    *,
    grid: np.ndarray | None = None,
) -> float:
    """t* maximising mean set-F1 on the canonical presentation; exact ties to the higher value.

    ``grid`` as in ``threshold_curve``: pass the grid over ALL the dataset's queries.
    """
    grid, f1 = threshold_curve(canonical_scores, relevant, n_grid, grid=grid)
    return float(grid[best_grid_index(f1)])


def retained(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Mask of S = {d : score(d) >= t}."""
    return np.asarray(scores, dtype=np.float64) >= threshold


def _pair_stats(kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """kept (Q, M, n) bool, M >= 2 -> (mean pairwise Jaccard, set flip rate), each (Q,)."""
    k = kept.astype(np.float64)
    inter = k @ k.transpose(0, 2, 1)
    size = np.diagonal(inter, axis1=1, axis2=2)
    union = size[:, :, None] + size[:, None, :] - inter
    a, b = np.triu_indices(kept.shape[1], 1)
    i, u = inter[:, a, b], union[:, a, b]
    with np.errstate(invalid="ignore", divide="ignore"):
        jac = np.where(u == 0, 1.0, i / u)
    return jac.mean(axis=1), _set_flip(kept)


def _set_flip(kept: np.ndarray) -> np.ndarray:
    """kept (Q, M, n) bool -> (Q,) share of the ever-retained docs whose membership is not
    the same in every presentation; 0 where no doc was ever retained."""
    ever = kept.any(axis=1)
    always = kept.all(axis=1)
    n_ever = ever.sum(axis=1)
    changed = (ever & ~always).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_ever == 0, 0.0, changed / np.maximum(n_ever, 1))


def set_stats(scores: np.ndarray, threshold: float) -> tuple[float, float, float]:
    """(mean pairwise Jaccard, set flip rate, mean retained size) of one query's (M, n) scores;
    the first two NaN for M < 2."""
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


def selected_grade(scores: np.ndarray, doc_ids: Sequence[str], grades: Sequence[float]) -> np.ndarray:
    """(M,) grade of the selected (top) response of each presentation."""
    g = np.asarray(grades, dtype=np.float64)
    return g[selection_order(scores, doc_ids)[:, 0]]


def selected_quality(
    scores: np.ndarray, doc_ids: Sequence[str], grades: Sequence[float], max_grade: float | None = None
) -> np.ndarray:
    """(M,) selected quality: the selected response's grade / the prompt's maximum grade.

    ``max_grade``: the largest grade among the prompt's judged responses (None: the
    largest of ``grades``). A maximum <= 0 leaves the ratio undefined: all NaN.
    """
    sel = selected_grade(scores, doc_ids, grades)
    top = float(np.max(np.asarray(grades, dtype=np.float64))) if max_grade is None else float(max_grade)
    if not top > 0:
        return np.full(sel.shape, np.nan)
    return sel / top


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
    """(mean pairwise Jaccard, set flip rate) of one query's kept (M, n) masks; NaN for M < 2.

    Set flip = share of the ever-retained docs whose membership changes (module doc)."""
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
