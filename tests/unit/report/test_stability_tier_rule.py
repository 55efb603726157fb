"""The tier rule: no tier holds a pair one of whose rows is significantly better than the other,
tiers are contiguous from 1, and no contiguous split with that property has fewer tiers; the
multiplicity statement that goes with Rank(UB) and the tiers."""

from __future__ import annotations

from itertools import combinations

import numpy as np

from presdep.report.stability_analysis import paired_bootstrap
from presdep.report.stability_tiers import (
    multiplicity_statement,
    rank_upper_bound,
    separation_free_tiers,
    tier_fields,
)
from test_stability_tiers import frame  # one dataset, one run per variant


def test_a_row_beaten_by_any_member_of_the_tier_opens_the_next():
    # A, B, C best first: A is separable from neither B nor C, but B is significantly better than C.
    # A tier led by A would take all three in; C must not share a tier with B.
    better = np.zeros((3, 3), dtype=bool)
    better[1, 2] = True
    assert separation_free_tiers(better, [0, 1, 2]).tolist() == [1, 1, 2]
    assert rank_upper_bound(better).tolist() == [1, 1, 2]
    fields = tier_fields(["A", "B", "C"], [0, 1, 2], better, 0.95)
    assert fields["tiers"] == [["A", "B"], ["C"]] and fields["tier"] == {"A": 1, "B": 1, "C": 2}


def test_the_hand_case_from_bootstrapped_rows():
    # A swings +-1 per query around 0.02 above B (and 0.12 above C), so its 95% intervals to B and
    # to C (half-width about 1.96 x 1/sqrt(100) = 0.2) include 0; B - C = 0.1 on every query.
    n = 100
    x = np.random.default_rng(5).uniform(0.3, 0.7, n)
    swing = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)  # mean exactly 0
    r = paired_bootstrap(frame({"A": x + 0.42 + swing, "B": x + 0.40, "C": x + 0.30}),
                         lower_is_better=False, resamples=2000, seed=4401)
    assert r["variants"] == ["A", "B", "C"]
    sig = {(a, b) for a in "ABC" for b in "ABC" if a != b and r["pairwise"][a][b]["significantlyBetter"]}
    assert sig == {("B", "C")}
    assert r["tiers"] == [["A", "B"], ["C"]] and r["rankUB"] == {"A": 1, "B": 1, "C": 2}


def _interval_order(rng: np.random.Generator, v: int) -> tuple[np.ndarray, list[int]]:
    """A strict partial order from one random interval per row (a beats b when a's interval lies wholly
    above b's), with the rows best first by interval centre."""
    centre, half = rng.normal(0, 1, v), rng.uniform(0, 1.5, v)
    better = (centre - half)[:, None] > (centre + half)[None, :]
    return better, sorted(range(v), key=lambda i: -centre[i])


def _difference_intervals(rng: np.random.Generator, v: int) -> tuple[np.ndarray, list[int]]:
    """a beats b when a random interval around mean_a - mean_b lies above 0: antisymmetric but not always
    transitive, as the bootstrap's pairwise intervals; rows best first by mean."""
    mean = rng.normal(0, 1, v)
    half = rng.uniform(0, 2, (v, v))
    half = np.triu(half, 1) + np.triu(half, 1).T
    better = (mean[:, None] - mean[None, :]) - half > 0
    np.fill_diagonal(better, False)
    return better, sorted(range(v), key=lambda i: -mean[i])


def _fewest_tiers(better: np.ndarray, order: list[int]) -> int:
    """Brute force over every contiguous split of ``order``: the fewest parts with no separable pair inside."""
    v = len(order)
    best = v
    for cuts in range(2 ** (v - 1)):
        bounds = [0, *(i + 1 for i in range(v - 1) if cuts >> i & 1), v]
        parts = [order[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
        if all(not (better[a, b] or better[b, a]) for part in parts for a, b in combinations(part, 2)):
            best = min(best, len(parts))
    return best


def test_random_orders_never_share_a_tier_across_a_separable_pair():
    rng = np.random.default_rng(2024)
    for case in range(600):
        v = int(rng.integers(1, 9))
        better, order = (_interval_order, _difference_intervals)[case % 2](rng, v)
        if case % 3 == 0:  # an order that need not agree with `better`: the rule must still hold
            order = [int(i) for i in rng.permutation(v)]
        tier = separation_free_tiers(better, order)
        walk = [int(tier[i]) for i in order]
        assert walk[0] == 1 and all(b - a in (0, 1) for a, b in zip(walk, walk[1:])), (case, walk)
        for a, b in combinations(range(v), 2):
            assert tier[a] != tier[b] or not (better[a, b] or better[b, a]), (case, a, b, walk)
        # A tier opens only where one must: the row opening it is separable from a member of the one before.
        for k, i in enumerate(order[1:], start=1):
            if walk[k] != walk[k - 1]:
                before = [j for j in order[:k] if tier[j] == walk[k - 1]]
                assert better[before, i].any() or better[i, before].any(), (case, walk)
        assert walk[-1] == _fewest_tiers(better, order), (case, walk)


def test_the_multiplicity_statement_names_the_level_and_the_pairs():
    # 4 rows make 6 pairs; Bonferroni at 95% needs 1 - 0.05 / 6 = 0.991666...
    four = multiplicity_statement(0.95, 4)
    assert four.startswith("unadjusted: per-pair 95% paired-bootstrap intervals")
    assert "no correction across the 6 pairs of 4 rows" in four and "level 0.991667" in four
    # One pair is its own family: no correction to suggest.
    assert multiplicity_statement(0.9, 2) == ("unadjusted: per-pair 90% paired-bootstrap intervals, "
                                              "no correction across the 1 pair of 2 rows")
