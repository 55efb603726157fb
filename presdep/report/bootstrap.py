"""The paired (hierarchical) bootstrap of a leaderboard and its rank statistics, on arrays.

numpy only: no tables, no files. The input (:class:`ClusterSums`) is already reduced
to per-cluster sums of item values per run; presdep.report.stability_analysis builds it
from per-query rows and turns :class:`RankStatistics` into the JSON result.

* One resample draws ONE set of cluster indices used for every run (paired). With
  several datasets it is hierarchical: datasets are drawn with replacement, then the
  clusters of each drawn copy; a resample's value is the unweighted mean of its
  dataset means (every dataset weighs the same whatever its size).
* Variants with several runs: each resample draws one run per variant.
* Ranks: 1 = best, average ranks for ties; scores are rounded to 12 decimals first so
  that float noise does not break exact ties.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 4401
MIN_SHARED_ITEMS = 30
MIN_RESAMPLES = 500
DEFAULT_LEVEL = 0.95  # the intervals' coverage, and the level at which rows count as separable
# Resamples processed at once: bounds memory (block x clusters weights) for 20,000 resamples.
_BLOCK = 1000
_TIE_DECIMALS = 12


@dataclass(frozen=True)
class ClusterSums:
    """What the bootstrap resamples: per dataset, cluster sums of item values per run."""

    n_runs: int
    variant_runs: list[np.ndarray]  # run column indices of each variant
    sums: list[np.ndarray]  # per dataset: (clusters, runs) sums of item values
    counts: list[np.ndarray]  # per dataset: (clusters,) item counts


@dataclass(frozen=True)
class RankStatistics:
    """Full-sample estimates and their bootstrap distribution; axis -1 (or 1) = variant."""

    full: np.ndarray  # (V,) full-sample mean of each variant
    boot: np.ndarray  # (B, V) resampled means
    rank_full: np.ndarray  # (V,) full-sample rank
    rank_boot: np.ndarray  # (B, V) resampled ranks
    probability_first: np.ndarray  # (V,) ties at the top split
    mean_interval: np.ndarray  # (2, V) percentile interval of the mean
    rank_interval: np.ndarray  # (2, V) percentile interval of the rank (observed ranks)
    taus: np.ndarray  # (B,) tau-b(full-sample ranking, resampled ranking); nan if undefined
    probability_better: np.ndarray  # (V, V) P(a better than b), ties split
    difference_interval: np.ndarray  # (2, V, V) percentile interval of mean_a - mean_b


def resampled_run_means(data: ClusterSums, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, runs): dataset-weighted means under paired (hierarchical) resampling."""
    n_d = len(data.sums)
    out = np.empty((resamples, data.n_runs))
    for start in range(0, resamples, _BLOCK):
        b = min(_BLOCK, resamples - start)
        # One dataset cannot be resampled meaningfully; several are drawn with replacement.
        dsel = rng.integers(0, n_d, size=(b, n_d)) if n_d > 1 else np.zeros((b, 1), dtype=np.int64)
        slot_means = np.empty((b, n_d, data.n_runs))
        for d in range(n_d):
            rows, slots = np.nonzero(dsel == d)
            k = rows.size
            if k == 0:
                continue
            n_c = data.counts[d].size
            idx = rng.integers(0, n_c, size=(k, n_c))
            # Multiplicity of each cluster in each draw: the weights of a weighted mean.
            w = np.bincount((np.arange(k)[:, None] * n_c + idx).ravel(), minlength=k * n_c)
            w = w.reshape(k, n_c).astype(float)
            slot_means[rows, slots] = (w @ data.sums[d]) / (w @ data.counts[d])[:, None]
        out[start : start + b] = slot_means.mean(axis=1)
    return out


def variant_values(data: ClusterSums, run_means: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(resamples, variants): one run drawn per variant per resample."""
    b = run_means.shape[0]
    cols = np.empty((b, len(data.variant_runs)), dtype=np.int64)
    for v, runs in enumerate(data.variant_runs):
        cols[:, v] = runs[rng.integers(0, runs.size, size=b)] if runs.size > 1 else runs[0]
    return np.take_along_axis(run_means, cols, axis=1)


def full_sample(data: ClusterSums) -> np.ndarray:
    """(variants,): the mean over a variant's runs of the dataset-weighted mean."""
    per_run = np.mean([s.sum(0) / c.sum() for s, c in zip(data.sums, data.counts)], axis=0)
    return np.array([per_run[r].mean() for r in data.variant_runs])


def tie_score(x: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """Larger is better; rounded so that float noise does not break exact ties."""
    r = np.round(x, _TIE_DECIMALS)
    return -r if lower_is_better else r


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ascending ranks (1 = smallest) along the last axis, ties sharing their average rank.

    A slice holding a NaN is all NaN (scipy's ``rankdata(..., method="average")`` with
    ``nan_policy="propagate"``).
    """
    a = np.asarray(values, dtype=np.float64)
    n = a.shape[-1]
    out = np.empty(a.shape)
    if n == 0:
        return out
    order = np.argsort(a, axis=-1, kind="mergesort")
    srt = np.take_along_axis(a, order, axis=-1)
    pos = np.broadcast_to(np.arange(n), a.shape)
    starts = np.ones(a.shape, dtype=bool)
    starts[..., 1:] = srt[..., 1:] != srt[..., :-1]
    ends = np.ones(a.shape, dtype=bool)
    ends[..., :-1] = starts[..., 1:]
    first = np.maximum.accumulate(np.where(starts, pos, 0), axis=-1)
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends, pos, n - 1), axis=-1), axis=-1), axis=-1)
    np.put_along_axis(out, order, 0.5 * (first + last) + 1.0, axis=-1)
    return np.where(np.isnan(a).any(axis=-1, keepdims=True), np.nan, out)


def ranks(score: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, 1 = largest score, ties share their average rank."""
    return average_ranks(-score)


def kendall_tau_b(reference: np.ndarray, others: np.ndarray) -> np.ndarray:
    """tau-b between a reference score vector (V,) and each row of others (B, V); nan if undefined."""
    i, j = np.triu_indices(reference.size, 1)
    s0 = np.sign(reference[i] - reference[j])
    s = np.sign(others[:, i] - others[:, j])
    denom = np.sqrt(np.abs(s0).sum() * np.abs(s).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (s * s0).sum(axis=1) / np.where(denom > 0, denom, 1), np.nan)


def percentile_interval(a: np.ndarray, method: str = "linear", level: float = DEFAULT_LEVEL) -> np.ndarray:
    """The percentile interval (95% unless told) along axis 0: shape (2, *a.shape[1:])."""
    tail = round((1.0 - level) / 2.0, _TIE_DECIMALS)  # 0.95 gives exactly 0.025, not 0.025000000000000022
    return np.quantile(a, [tail, 1.0 - tail], axis=0, method=method)


def difference_interval(boot: np.ndarray, level: float = DEFAULT_LEVEL) -> np.ndarray:
    """(2, V, V): percentile interval of the paired differences mean_a - mean_b of resampled means (B, V)."""
    return percentile_interval(boot[:, :, None] - boot[:, None, :], level=level)


def rank_statistics(full: np.ndarray, boot: np.ndarray, lower_is_better: bool) -> RankStatistics:
    """Ranks, intervals, P(first), tau-b and pairwise comparisons of resampled means."""
    s_full = tie_score(full, lower_is_better)
    s_boot = tie_score(boot, lower_is_better)
    rank_boot = ranks(s_boot)
    is_best = s_boot == s_boot.max(axis=1, keepdims=True)
    better = (s_boot[:, :, None] > s_boot[:, None, :]) + 0.5 * (s_boot[:, :, None] == s_boot[:, None, :])
    return RankStatistics(
        full=full,
        boot=boot,
        rank_full=ranks(s_full),
        rank_boot=rank_boot,
        probability_first=(is_best / is_best.sum(axis=1, keepdims=True)).mean(axis=0),
        mean_interval=percentile_interval(boot),
        rank_interval=percentile_interval(rank_boot, method="inverted_cdf"),  # observed ranks, not interpolated
        taus=kendall_tau_b(s_full, s_boot),
        probability_better=better.mean(axis=0),
        difference_interval=difference_interval(boot),
    )


def bootstrap(data: ClusterSums, *, lower_is_better: bool, resamples: int, seed: int) -> RankStatistics:
    """The paired bootstrap: ``resamples`` draws from ``seed``, then the rank statistics."""
    rng = np.random.default_rng(seed)
    boot = variant_values(data, resampled_run_means(data, resamples, rng), rng)
    return rank_statistics(full_sample(data), boot, lower_is_better)


def rank_distribution(rank_boot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct ranks, share of resamples at each) of one variant's resampled ranks (B,)."""
    vals, cnt = np.unique(rank_boot, return_counts=True)
    return vals, cnt / rank_boot.size


def json_float(x: float) -> float | None:
    """``x`` as a JSON number: a float, or None where it is not finite."""
    x = float(x)
    return x if math.isfinite(x) else None
