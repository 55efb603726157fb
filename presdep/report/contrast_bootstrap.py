"""The paired hierarchical bootstrap of a difference between two Table 1 cells, and TOST.

numpy only, on arrays (presdep.report.contrasts builds them from the metrics). One side is per
dataset a ``(seeds, queries)`` array on the queries both sides share. Two designs
(docs/methods/contrasts.md):

* ``nested`` (the default; the paper's reducer): per training seed and dataset the paired
  per-query differences a - b (an untrained row, one run without a seed, pairs with every seed
  of the other; two trained rows pair on the seeds they share). One draw chooses len(seeds) seeds with
  replacement, for EACH chosen seed len(datasets) datasets afresh, and for each chosen dataset
  its query differences with replacement; the draw is the mean over chosen seeds of the mean
  over chosen datasets of the query mean. ``default_rng(seed)`` is read in this order: the
  (draws, seeds) seed indices, the (draws, seeds, datasets) dataset indices, then dataset by
  dataset the query indices of every slot that drew it, slots in (draw, seed, position) order.
* ``crossed``: one dataset draw and one query draw per resample, shared by both sides and every
  drawn seed; the seeds are drawn last (the same draw for both sides when they have the same
  seeds, else each side its own), a side's value the mean over its drawn seeds.

The estimate is the same without resampling; the interval is the percentile interval; TOST
tests |difference| < margin with SE = the draws' standard deviation (ddof 1) and normal
quantiles. Beside them each paired seed's value and its own interval (the nested bootstrap of
that seed alone, seeded with the bootstrap seed + the training seed) and the gate reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from presdep.contracts.errors import InvalidInput
from presdep.report.bootstrap import ClusterSums, percentile_interval, resampled_run_means

ALPHA = 0.05
DESIGNS = ("nested", "crossed")
# A difference this small is not read as a finding whatever its interval (the paper's gate).
GATE_MAGNITUDE = 0.01
_Z_TOST = NormalDist().inv_cdf(1.0 - ALPHA)  # TOST at alpha is the (1 - 2 alpha) interval inside +-margin
# Query indices drawn at once: bounds memory (~32 MB of indices and as many values).
_CHUNK_CELLS = 1 << 22


@dataclass(frozen=True)
class Side:
    """One cell: per dataset a (seeds, queries) array, queries aligned with the other side."""

    values: list[np.ndarray]
    seeds: tuple[int | None, ...]


@dataclass(frozen=True)
class SeedValue:
    """One training seed's difference and its own 95% interval."""

    seed: int | None
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Difference:
    estimate: float
    low: float
    high: float
    se: float
    tost_p: float
    boot: np.ndarray
    per_seed: tuple[SeedValue, ...] = ()

    @property
    def excludes_zero(self) -> bool:
        return bool(self.low > 0 or self.high < 0)

    def equivalent(self, alpha: float = ALPHA) -> bool:
        return bool(self.tost_p < alpha)

    @property
    def tost_interval(self) -> tuple[float, float]:
        """The 90% interval estimate +- z(0.95) SE: equivalent when it lies inside +-margin."""
        return self.estimate - _Z_TOST * self.se, self.estimate + _Z_TOST * self.se

    @property
    def seed_sd(self) -> float | None:
        return float(np.std([s.value for s in self.per_seed], ddof=1)) if len(self.per_seed) > 1 else None

    @property
    def seed_sign_change(self) -> bool:
        values = [s.value for s in self.per_seed]
        return bool(values) and min(values) < 0 < max(values)

    def gate_reasons(self) -> list[str]:
        """Why the difference is not read as a finding (empty: it is)."""
        reasons = [f"|difference| <= {GATE_MAGNITUDE}"] if abs(self.estimate) <= GATE_MAGNITUDE else []
        reasons += ["seed sign change"] if self.seed_sign_change else []
        return reasons + ([] if self.excludes_zero else ["interval covers 0"])


def full_value(side: Side) -> float:
    """Mean over seeds of the mean over datasets of the mean over queries."""
    return float(np.mean([np.mean([v[s].mean() for v in side.values]) for s in range(len(side.seeds))]))


def paired_seed_differences(a: Side, b: Side) -> tuple[tuple[int | None, ...], list[np.ndarray]] | None:
    """The training seeds the two sides pair on and per dataset the (seeds, queries) differences
    a - b; None when two trained sides share no seed."""
    if b.seeds == (None,):
        seeds, rows_a, rows_b = a.seeds, list(range(len(a.seeds))), [0] * len(a.seeds)
    elif a.seeds == (None,):
        seeds, rows_a, rows_b = b.seeds, [0] * len(b.seeds), list(range(len(b.seeds)))
    else:
        seeds = tuple(s for s in a.seeds if s in b.seeds)
        rows_a, rows_b = [a.seeds.index(s) for s in seeds], [b.seeds.index(s) for s in seeds]
    if not seeds:
        return None
    return seeds, [x[rows_a] - y[rows_b] for x, y in zip(a.values, b.values)]


def seed_values(diffs: list[np.ndarray]) -> np.ndarray:
    """(seeds,): each seed's equal-weight mean over datasets of the query mean."""
    return np.mean([d.mean(axis=1) for d in diffs], axis=0)


def nested_draws(diffs: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples,) nested draws of per-dataset (seeds, queries) differences (the order of the
    random numbers is in the module's docstring)."""
    n_seeds, n_sets = diffs[0].shape[0], len(diffs)
    chosen_seeds = rng.integers(0, n_seeds, size=(resamples, n_seeds))
    chosen_sets = rng.integers(0, n_sets, size=(resamples, n_seeds, n_sets))
    slot_means = np.empty(chosen_sets.shape)
    for d, values in enumerate(diffs):
        draw, seed_slot, set_slot = np.nonzero(chosen_sets == d)  # row-major: (draw, seed, position)
        training = chosen_seeds[draw, seed_slot]
        n_q = values.shape[1]
        step = max(1, _CHUNK_CELLS // n_q)
        for start in range(0, draw.size, step):
            part = slice(start, start + step)
            queries = rng.integers(0, n_q, size=(training[part].size, n_q))
            slot_means[draw[part], seed_slot[part], set_slot[part]] = values[training[part, None], queries].mean(axis=1)
    # every chosen seed holds the same number of datasets: the mean of means is the overall mean
    return slot_means.mean(axis=(1, 2))


def crossed_draws(a: Side, b: Side, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples,) crossed draws: datasets and queries drawn once per resample for every seed."""
    na, nb = len(a.seeds), len(b.seeds)
    # the seeds of both sides as the runs of one ClusterSums: datasets and queries drawn once for all
    sums = [np.concatenate([x, y], axis=0).T for x, y in zip(a.values, b.values)]
    data = ClusterSums(n_runs=na + nb, variant_runs=[np.arange(na), na + np.arange(nb)], sums=sums,
                       counts=[np.ones(s.shape[0]) for s in sums])
    runs = resampled_run_means(data, resamples, rng)
    draw_a = rng.integers(0, na, size=(resamples, na))
    draw_b = draw_a if a.seeds == b.seeds else rng.integers(0, nb, size=(resamples, nb))
    return (np.take_along_axis(runs[:, :na], draw_a, axis=1).mean(axis=1)
            - np.take_along_axis(runs[:, na:], draw_b, axis=1).mean(axis=1))


def _per_seed(seeds: tuple[int | None, ...], diffs: list[np.ndarray], resamples: int,
              seed: int) -> tuple[SeedValue, ...]:
    """Each training seed's value and the nested bootstrap of that seed alone (rng seed = the
    bootstrap seed + the training seed); none for untrained rows."""
    if seeds == (None,):
        return ()
    out = []
    for i, training in enumerate(seeds):
        alone = [d[i : i + 1] for d in diffs]
        low, high = percentile_interval(nested_draws(alone, resamples, np.random.default_rng(seed + training)))
        out.append(SeedValue(training, float(seed_values(alone)[0]), float(low), float(high)))
    return tuple(out)


def paired_difference(a: Side, b: Side, *, resamples: int, seed: int, margin: float,
                      design: str = "nested") -> Difference:
    """value(a) - value(b): the estimate, 95% percentile interval, bootstrap SE, TOST p and each seed's value."""
    if design not in DESIGNS:
        raise InvalidInput(f"contrasts.design: {design!r} is not one of {list(DESIGNS)}")
    if len(a.values) != len(b.values) or any(x.shape[1] != y.shape[1] for x, y in zip(a.values, b.values)):
        raise ValueError("the two sides must hold the same datasets and queries")
    paired = paired_seed_differences(a, b)
    if design == "nested":
        if paired is None:
            raise InvalidInput(f"the rows share no training seed ({list(a.seeds)} against {list(b.seeds)}): the nested "
                               "design pairs seeds (contrasts.design: crossed draws each row's seeds apart)")
        boot = nested_draws(paired[1], resamples, np.random.default_rng(seed))
        estimate = float(seed_values(paired[1]).mean())
    else:
        boot = crossed_draws(a, b, resamples, np.random.default_rng(seed))
        estimate = full_value(a) - full_value(b)
    low, high = percentile_interval(boot)
    se = float(np.std(boot, ddof=1)) if resamples > 1 else 0.0
    per_seed = _per_seed(*paired, resamples, seed) if paired is not None else ()
    return Difference(estimate, float(low), float(high), se, tost_p(estimate, se, margin), boot, per_seed)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def tost_p(estimate: float, se: float, margin: float) -> float:
    """The TOST p-value of |difference| < margin: the larger of the two one-sided p-values
    (H0: difference <= -margin; H0: difference >= margin), normal with standard error ``se``."""
    if se <= 0:
        return 0.0 if abs(estimate) < margin else 1.0
    return max(_normal_sf((estimate + margin) / se), _normal_sf((margin - estimate) / se))


__all__ = ["ALPHA", "DESIGNS", "GATE_MAGNITUDE", "Difference", "SeedValue", "Side", "crossed_draws", "full_value",
           "nested_draws", "paired_difference", "paired_seed_differences", "seed_values", "tost_p"]
