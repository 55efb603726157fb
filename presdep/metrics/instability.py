"""Instability of rankings across presentations: tau-PSI and Zeng et al.'s PSI.

tau-PSI_q = clip((1 - mean over all M(M-1)/2 presentation pairs of Kendall tau) / 2, 0, 1).
0 = identical rankings, 0.5 = unrelated, 1 = reversed. Exact, vectorised:

* strict rankings (no tied scores inside any presentation of the query): tau-a via
  the identity sum_{a<b} x^a_ij x^b_ij = (c_ij^2 - q_ij) / 2 with
  x^a_ij = sign(s^a_i - s^a_j), c_ij = sum_a x^a_ij and q_ij = sum_a (x^a_ij)^2 = M;
  the cost is O(M n^2) per query instead of O(M^2 n^2).
* tied scores: tau-b per pair (scipy's definition) from the Gram matrix of the
  sign vectors, tau-b_ab = <x^a, x^b> / sqrt(|x^a|^2 |x^b|^2); slower but exact.

Undefined cases (documented choices):

* M < 2 (a single presentation) or n < 2: no pair to compare -> NaN.
* tau-b of a pair where one presentation gives every doc the same score is
  undefined (scipy returns NaN) -> the query's tau-PSI is NaN, as the brute-force
  mean over scipy.stats.kendalltau would be.

Zeng PSI = 1 - min_b s_b / max_b s_b over the non-empty position buckets (top,
middle, bottom third); undefined (NaN, written as null) with fewer than two
non-empty buckets or when every bucket mean is 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from presdep.contracts.errors import InvalidInput

# Bytes of the largest temporary (queries x n x n) that one batch may allocate.
_CHUNK_BYTES = 64 * 2**20

N_BUCKETS = 3  # Zeng PSI: top, middle, bottom third of the presented list


def _has_ties(scores: np.ndarray) -> np.ndarray:
    """(Q, M, n) -> (Q,) whether any presentation of the query has tied scores."""
    s = np.sort(scores, axis=-1)
    return (np.diff(s, axis=-1) == 0).any(axis=(-1, -2))


def _mean_tau_a_strict(scores: np.ndarray) -> np.ndarray:
    """Mean pairwise tau-a over presentations, (Q, M, n) strict rankings -> (Q,)."""
    q_count, m, n = scores.shape
    # Ranks as small integers make the O(n^2) comparisons cheap and exact.
    rank_dtype = np.uint8 if n <= 255 else np.uint16 if n <= 65535 else np.int64
    ranks = scores.argsort(axis=-1).argsort(axis=-1).astype(rank_dtype)
    count_dtype = np.uint8 if m <= 255 else np.int64
    out = np.empty(q_count, dtype=np.float64)
    step = max(1, _CHUNK_BYTES // max(1, n * n * 8))
    pairs_docs = n * (n - 1) / 2
    pairs_pres = m * (m - 1) / 2
    for lo in range(0, q_count, step):
        r = ranks[lo : lo + step]
        # g[i, j] = number of presentations ranking doc i below doc j (s_i > s_j in rank terms).
        g = np.zeros((r.shape[0], n, n), dtype=count_dtype)
        for a in range(m):
            ra = r[:, a]
            g += ra[:, :, None] > ra[:, None, :]
        c = 2 * g.astype(np.int64) - m  # c_ij for i != j (x in {-1, +1}); diagonal is -m
        c2 = (c * c).sum(axis=(1, 2)) - n * m * m  # drop the diagonal
        c2 = c2 / 2  # each unordered pair counted twice
        concord = (c2 - pairs_docs * m) / 2  # sum_{i<j} (c_ij^2 - q_ij) / 2, q_ij = m
        out[lo : lo + step] = concord / (pairs_docs * pairs_pres)
    return out


def _mean_tau_b(scores: np.ndarray) -> np.ndarray:
    """Mean pairwise tau-b over presentations, (Q, M, n) any scores -> (Q,); NaN if undefined."""
    q_count, m, n = scores.shape
    out = np.empty(q_count, dtype=np.float64)
    iu_a, iu_b = np.triu_indices(m, 1)
    step = max(1, _CHUNK_BYTES // max(1, m * n * n * 4))
    for lo in range(0, q_count, step):
        s = scores[lo : lo + step]
        x = np.sign(s[:, :, :, None] - s[:, :, None, :]).astype(np.float32)
        x = x.reshape(s.shape[0], m, n * n)
        # Entries are -1/0/1 and counts < 2^24, so float32 products are exact.
        gram = (x @ x.transpose(0, 2, 1)).astype(np.float64) / 2
        diag = np.diagonal(gram, axis1=1, axis2=2)
        denom = np.sqrt(diag[:, iu_a] * diag[:, iu_b])
        with np.errstate(invalid="ignore", divide="ignore"):
            tau = gram[:, iu_a, iu_b] / denom
        tau[denom == 0] = np.nan
        out[lo : lo + step] = tau.mean(axis=1)
    return out


def mean_pairwise_tau(scores: np.ndarray) -> np.ndarray | float:
    """Mean Kendall tau over all presentation pairs.

    ``scores``: (M, n) for one query or (Q, M, n) for Q queries of equal shape.
    tau-a (= tau-b) for queries without ties, tau-b for queries with ties.
    """
    s = np.asarray(scores, dtype=np.float64)
    single = s.ndim == 2
    if single:
        s = s[None]
    if s.ndim != 3:
        raise InvalidInput(f"scores must be (M, n) or (Q, M, n), got shape {s.shape}")
    if np.isnan(s).any():
        raise InvalidInput("scores contain NaN")
    q_count, m, n = s.shape
    out = np.full(q_count, np.nan)
    if m >= 2 and n >= 2 and q_count:
        tied = _has_ties(s)
        if (~tied).any():
            out[~tied] = _mean_tau_a_strict(s[~tied])
        if tied.any():
            out[tied] = _mean_tau_b(s[tied])
    return float(out[0]) if single else out


def tau_psi(scores: np.ndarray) -> np.ndarray | float:
    """tau-PSI of one query (M, n) or of Q queries (Q, M, n); NaN where undefined (see module doc)."""
    tau = mean_pairwise_tau(scores)
    psi = np.clip((1.0 - np.asarray(tau)) / 2.0, 0.0, 1.0)  # clip only guards rounding
    return float(psi) if psi.ndim == 0 else psi


def tau_psi_many(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """tau-PSI of queries with possibly different (M, n): batches queries of equal shape."""
    out = np.full(len(blocks), np.nan)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, b in enumerate(blocks):
        by_shape.setdefault(np.shape(b), []).append(i)
    for shape, idx in by_shape.items():
        if len(shape) != 2:
            raise InvalidInput(f"each block must be (M, n), got {shape}")
        out[idx] = tau_psi(np.stack([np.asarray(blocks[i], dtype=np.float64) for i in idx]))
    return out


# ---------------------------------------------------------------- Zeng et al. PSI


def position_bucket(position: np.ndarray | int, n: int) -> np.ndarray | int:
    """Third of a presented list of n docs holding 0-based ``position``: 0 top, 1 middle, 2 bottom.

    bucket = floor(3 * position / n); middle injection's index n // 2 is always the middle
    third for n >= 3.
    """
    p = np.asarray(position)
    if n < 1 or (p < 0).any() or (p >= n).any():
        raise InvalidInput(f"position(s) {p.tolist()} outside a list of {n}")
    b = (N_BUCKETS * p) // n
    return int(b) if np.ndim(b) == 0 else b


def zeng_bucket_means(ndcg: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """Mean nDCG of the presentations in each bucket, (3,), NaN for an empty bucket."""
    ndcg = np.asarray(ndcg, dtype=np.float64)
    buckets = np.asarray(buckets)
    if ndcg.shape != buckets.shape:
        raise InvalidInput(f"ndcg {ndcg.shape} and buckets {buckets.shape} must align")
    out = np.full(N_BUCKETS, np.nan)
    for b in range(N_BUCKETS):
        sel = buckets == b
        if sel.any():
            out[b] = ndcg[sel].mean()
    return out


def zeng_from_bucket_means(means: np.ndarray) -> float:
    """1 - min_b s_b / max_b s_b over the NON-EMPTY buckets.

    Fewer than two non-empty buckets: no positional contrast is observable -> NaN.
    Every non-empty bucket mean 0: the ratio min / max is undefined -> NaN (null).
    """
    m = np.asarray(means, dtype=np.float64)
    m = m[~np.isnan(m)]
    if m.size < 2:
        return math.nan
    hi, lo = m.max(), m.min()
    if hi == 0:
        return math.nan
    return float(1.0 - lo / hi)


def zeng_psi(ndcg: np.ndarray, buckets: np.ndarray) -> float:
    """Zeng et al.'s PSI of one query from per-presentation nDCG and position buckets."""
    return zeng_from_bucket_means(zeng_bucket_means(ndcg, buckets))


def zeng_psi_corpus(bucket_means: np.ndarray, buckets: int = N_BUCKETS) -> float:
    """Corpus form: average each bucket's per-query means (over queries where the bucket
    is non-empty), then apply 1 - min/max to the ``buckets`` averages (three position buckets;
    a render perturbation's variants are its buckets)."""
    bm = np.asarray(bucket_means, dtype=np.float64).reshape(-1, buckets)
    with np.errstate(invalid="ignore"):
        counts = (~np.isnan(bm)).sum(axis=0)
        avg = np.where(counts > 0, np.nansum(bm, axis=0) / np.maximum(counts, 1), np.nan)
    return zeng_from_bucket_means(avg)
