"""Does the slot matter? A permutation test of "no slot effect", the slot share's chance level,
and query-clustered intervals of the slot effects (docs/methods/position.md).

All three read the same input as the slot profile: per query, the raw single-pass scores of
its random shuffles and the slot each document sat in, as (scores, slots) arrays of shape
(M, n) (presdep.metrics.position.query_blocks). They hold for any design: the paper's
shuffles, per-query draws or the balanced cyclic design.

* **slot share** of one query: what an additive slot effect explains of the score variance
  beyond the document means (position.variance_shares' slot term). Here it is the squared
  length of the document-centred scores projected on the document-centred slot indicators,
  over the total sum of squares: the same number without a least-squares fit per call, so a
  permutation costs one matrix product.
* **permutation test**: statistic = the slot share, mean over the queries where it is
  defined (the aggregate ``var_share_slot`` row). Null: for every document of every query,
  its M scores are reassigned to its M observed slots at random (scores permuted within
  the document, independently per document and query), which keeps each document's scores
  and breaks only their link to the slot. p = (1 + #{null >= observed}) / (1 + permutations).
* **chance level**: the expected slot share of a pure-noise scorer (scores exchangeable over
  all M n rows of a query) on the query's own design, exactly r / (N - 1) with N = M n and r
  the rank of the document-centred slot indicators (B - 1 when shuffles connect every slot):
  for any fixed score vector, averaging y'Py / y'(I - J)y over all orders of y gives
  trace(P) / (N - 1) because P kills constants. Mean over the same queries as the share.
* **clustered intervals**: each slot's centred mean (score minus its document's mean over
  the shuffles) with a 95% percentile interval from resampling whole queries with
  replacement, so rows of one query, which share the query's slot profile, are not counted
  as independent (position.slot_profile's normal interval does count them so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PERMUTATIONS = 999
BOOTSTRAP_RESAMPLES = 2000
# Fixed seeds: the same scores give the same p-value and intervals on every machine and run.
PERMUTATION_SEED = 4040
BOOTSTRAP_SEED = 4041
# Permuted null shares equal to the observed one up to float rounding count as ">=" (the
# identity scorer's shares are all exactly 0 and its p-value must be 1, not noise).
_TIE = 1e-12
# Permutations processed at once: bounds memory at (block, M, n) floats per query.
_BLOCK = 250

Block = tuple[np.ndarray, np.ndarray]  # (scores (M, n), slots (M, n)) of one query


def slot_basis(slots: np.ndarray) -> np.ndarray:
    """Orthonormal basis (M n, r) of one query's slot indicators with each document's mean over
    the shuffles removed: the directions a slot effect adds beyond the document means (rows in
    the order of ``slots.ravel()``)."""
    m, n = slots.shape
    levels = np.unique(slots)
    ind = (slots[..., None] == levels).astype(np.float64)  # (M, n, L)
    z = (ind - ind.mean(axis=0, keepdims=True)).reshape(m * n, levels.size)
    if z.size == 0:
        return np.zeros((m * n, 0))
    u, sv, _ = np.linalg.svd(z, full_matrices=False)
    tol = (sv.max() if sv.size else 0.0) * max(z.shape) * np.finfo(np.float64).eps
    return u[:, sv > tol]


def _centred(scores: np.ndarray) -> tuple[np.ndarray, float]:
    """Scores minus each document's mean over the shuffles, and the total sum of squares."""
    y = np.asarray(scores, dtype=np.float64)
    return y - y.mean(axis=0, keepdims=True), float(((y - y.mean()) ** 2).sum())


def slot_share(scores: np.ndarray, slots: np.ndarray) -> float:
    """One query's slot share of the score variance (position.variance_shares' slot term); NaN when
    undefined (fewer than two shuffles, or constant scores)."""
    if scores.shape[0] < 2:
        return math.nan
    e, total = _centred(scores)
    if total == 0:
        return math.nan
    return min(1.0, float(((e.ravel() @ slot_basis(slots)) ** 2).sum()) / total)


def slot_share_chance(slots: np.ndarray) -> float:
    """The expected slot share of a pure-noise scorer on one query's design: r / (M n - 1)."""
    m, n = slots.shape
    if m < 2 or m * n < 2:
        return math.nan
    return slot_basis(slots).shape[1] / (m * n - 1)


@dataclass(frozen=True)
class SlotTest:
    """The permutation test of "no slot effect" over a run's queries (NaN fields: no query defined)."""

    observed: float  # mean over queries of the slot share
    p_value: float
    null_mean: float  # mean of the permutation null: this scorer's share if the slot did not matter
    chance: float  # mean over the same queries of the pure-noise share r / (N - 1)
    permutations: int
    queries: int


def slot_permutation_test(blocks: Sequence[Block], permutations: int = PERMUTATIONS,
                          seed: int = PERMUTATION_SEED) -> SlotTest:
    """Permute each document's scores over its observed slots (independently per document and
    query), ``permutations`` times; p = (1 + #{null >= observed}) / (1 + permutations)."""
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    rng = np.random.default_rng(seed)
    null = np.zeros(permutations)
    observed, chance = [], []
    for scores, slots in blocks:
        m, n = scores.shape
        e, total = _centred(scores)
        if m < 2 or total == 0:
            continue
        q = slot_basis(slots)
        observed.append(min(1.0, float(((e.ravel() @ q) ** 2).sum()) / total))
        chance.append(q.shape[1] / (m * n - 1))
        for start in range(0, permutations, _BLOCK):
            k = min(_BLOCK, permutations - start)
            # Each (permutation, document) column is shuffled on its own: axis 1 = the shuffles.
            perm = rng.permuted(np.repeat(e[None], k, axis=0), axis=1).reshape(k, m * n)
            null[start:start + k] += ((perm @ q) ** 2).sum(axis=1) / total
    if not observed:
        return SlotTest(math.nan, math.nan, math.nan, math.nan, permutations, 0)
    null /= len(observed)
    obs = float(np.mean(observed))
    p = (1 + int((null >= obs - _TIE).sum())) / (1 + permutations)
    return SlotTest(obs, p, float(null.mean()), float(np.mean(chance)), permutations, len(observed))


def _slot_sums(blocks: Sequence[Block]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slot levels, and per query and level the sum and count of centred scores."""
    levels = np.unique(np.concatenate([np.asarray(sl).ravel() for _, sl in blocks]))
    sums = np.zeros((len(blocks), levels.size))
    counts = np.zeros((len(blocks), levels.size))
    for i, (scores, slots) in enumerate(blocks):
        e, _ = _centred(scores)
        at = np.searchsorted(levels, np.asarray(slots).ravel())
        sums[i] = np.bincount(at, weights=e.ravel(), minlength=levels.size)
        counts[i] = np.bincount(at, minlength=levels.size)
    return levels, sums, counts


def clustered_slot_intervals(blocks: Sequence[Block], resamples: int = BOOTSTRAP_RESAMPLES,
                             seed: int = BOOTSTRAP_SEED) -> dict[str, list[float]]:
    """Per slot: the centred mean and its query-clustered 95% percentile interval (low, high).

    One resample draws the queries with replacement and recomputes every slot's centred mean
    over the drawn queries' rows. Fewer than two queries: the intervals are NaN (no
    between-query variation to resample)."""
    out: dict[str, list[float]] = {"slot": [], "centred_mean": [], "low": [], "high": []}
    if not blocks:
        return out
    levels, sums, counts = _slot_sums(blocks)
    with np.errstate(invalid="ignore", divide="ignore"):
        full = sums.sum(axis=0) / counts.sum(axis=0)
        if len(blocks) < 2:
            low = high = np.full(levels.size, np.nan)
        else:
            rng = np.random.default_rng(seed)
            q = len(blocks)
            idx = rng.integers(0, q, size=(resamples, q))
            # Multiplicity of each query in each resample: the weights of a weighted mean.
            w = np.bincount((np.arange(resamples)[:, None] * q + idx).ravel(), minlength=resamples * q)
            w = w.reshape(resamples, q).astype(np.float64)
            means = (w @ sums) / (w @ counts)  # NaN where no drawn query showed the slot
            low, high = np.nanpercentile(means, [2.5, 97.5], axis=0)
    out["slot"] = [float(s) for s in levels]
    out["centred_mean"] = [float(v) for v in full]
    out["low"] = [float(v) for v in low]
    out["high"] = [float(v) for v in high]
    return out


__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "PERMUTATIONS", "PERMUTATION_SEED", "SlotTest",
           "clustered_slot_intervals", "slot_basis", "slot_permutation_test", "slot_share", "slot_share_chance"]
