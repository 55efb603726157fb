"""The paired hierarchical bootstrap of a difference between two Table 1 cells, and TOST.

numpy only, on arrays (presdep.report.contrasts builds them from the metrics). One side is
``(seeds, datasets, queries)`` values on the queries both sides share; one resample draws

1. the seeds with replacement (the same draw for both sides when they have the same seeds,
   else each side its own: an untrained row has one "seed");
2. the datasets with replacement (one draw for both sides), every drawn dataset weighing the
   same;
3. within each drawn dataset the queries with replacement (one draw for both sides),

and a side's value is the mean over its drawn seeds of the mean over drawn datasets of the
query-weighted mean. The full-sample value is the same without resampling. The interval is
the percentile interval; TOST tests equivalence within +-margin with the bootstrap SE and
normal quantiles (two one-sided tests at ``alpha``: equivalent when both reject).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from presdep.report.bootstrap import ClusterSums, percentile_interval, resampled_run_means

ALPHA = 0.05


@dataclass(frozen=True)
class Side:
    """One cell: per dataset a (seeds, queries) array, queries aligned with the other side."""

    values: list[np.ndarray]
    seeds: tuple[int | None, ...]


@dataclass(frozen=True)
class Difference:
    estimate: float
    low: float
    high: float
    se: float
    tost_p: float
    boot: np.ndarray

    @property
    def excludes_zero(self) -> bool:
        return bool(self.low > 0 or self.high < 0)

    def equivalent(self, alpha: float = ALPHA) -> bool:
        return bool(self.tost_p < alpha)


def full_value(side: Side) -> float:
    """Mean over seeds of the mean over datasets of the mean over queries."""
    return float(np.mean([np.mean([v[s].mean() for v in side.values]) for s in range(len(side.seeds))]))


def _seed_means(run_means: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """(B,) mean of the drawn seed columns of (B, seeds) run means for each resample."""
    return np.take_along_axis(run_means, draws, axis=1).mean(axis=1)


def paired_difference(a: Side, b: Side, *, resamples: int, seed: int, margin: float) -> Difference:
    """value(a) - value(b): full-sample estimate, 95% percentile interval, bootstrap SE and the TOST p."""
    if len(a.values) != len(b.values) or any(x.shape[1] != y.shape[1] for x, y in zip(a.values, b.values)):
        raise ValueError("the two sides must hold the same datasets and queries")
    na, nb = len(a.seeds), len(b.seeds)
    # the seeds of both sides as the runs of one ClusterSums: datasets and queries drawn once for all
    sums = [np.concatenate([x, y], axis=0).T for x, y in zip(a.values, b.values)]
    data = ClusterSums(n_runs=na + nb, variant_runs=[np.arange(na), na + np.arange(nb)], sums=sums,
                       counts=[np.ones(s.shape[0]) for s in sums])
    rng = np.random.default_rng(seed)
    runs = resampled_run_means(data, resamples, rng)
    draw_a = rng.integers(0, na, size=(resamples, na))
    draw_b = draw_a if a.seeds == b.seeds else rng.integers(0, nb, size=(resamples, nb))
    boot = _seed_means(runs[:, :na], draw_a) - _seed_means(runs[:, na:], draw_b)
    estimate = full_value(a) - full_value(b)
    low, high = percentile_interval(boot)
    se = float(np.std(boot, ddof=1)) if resamples > 1 else 0.0
    return Difference(estimate, float(low), float(high), se, tost_p(estimate, se, margin), boot)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def tost_p(estimate: float, se: float, margin: float) -> float:
    """The TOST p-value of |difference| < margin: the larger of the two one-sided p-values
    (H0: difference <= -margin; H0: difference >= margin), normal with standard error ``se``."""
    if se <= 0:
        return 0.0 if abs(estimate) < margin else 1.0
    return max(_normal_sf((estimate + margin) / se), _normal_sf((margin - estimate) / se))


__all__ = ["ALPHA", "Difference", "Side", "full_value", "paired_difference", "tost_p"]
