"""The slot-effect test, its chance level and the query-clustered intervals (presdep.metrics.slot_test)
against independent computations: the least-squares shares of presdep.metrics.position, brute
force over every order of a small score vector, a loop-by-loop bootstrap, seeded simulations of
null and pure-noise scorers, and the balanced cyclic design whose answers are known."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binom, kstest

from presdep.contracts.presentations import chunk_positions, cyclic_order
from presdep.metrics import position, slot_test


def slots_of(orders: list[list[int]], b: int, chunking: str = "contiguous") -> np.ndarray:
    """slots[m, d]: the slot document d sat in when presentation m was cut into prompts (as scoring does)."""
    n = len(orders[0])
    out = np.full((len(orders), n), -1)
    for m, order in enumerate(orders):
        for pos in chunk_positions(n, b, chunking):
            for s, x in enumerate(pos):
                out[m, order[x]] = s
    assert (out >= 0).all()
    return out


def random_design(rng: np.random.Generator, m: int, n: int, b: int, chunking: str = "contiguous") -> np.ndarray:
    """Slots of m uniform random shuffles of n documents cut into prompts of b."""
    return slots_of([list(rng.permutation(n)) for _ in range(m)], b, chunking)


def cyclic_design(m: int, n: int, b: int, chunking: str = "contiguous") -> np.ndarray:
    return slots_of([cyclic_order(n, k, b, chunking) for k in range(m)], b, chunking)


@pytest.mark.parametrize("m,n,b,chunking", [(5, 9, 4, "contiguous"), (3, 20, 20, "contiguous"),
                                            (4, 11, 3, "round_robin"), (2, 7, 7, "contiguous")])
def test_slot_share_equals_the_least_squares_share(m, n, b, chunking):
    rng = np.random.default_rng(m * 100 + n)
    slots = random_design(rng, m, n, b, chunking)
    scores = rng.normal(size=n)[None, :] + 0.4 * slots + rng.normal(size=(m, n))
    assert slot_test.slot_share(scores, slots) == pytest.approx(position.variance_shares(scores, slots)[1], abs=1e-9)


@pytest.mark.parametrize("chunking", ["contiguous", "round_robin"])
def test_cyclic_design_gives_a_pure_slot_scorer_share_one_and_the_identity_scorer_zero(chunking):
    n, b = 12, 4
    slots = cyclic_design(b, n, b, chunking)  # M = B
    f = np.array([3.0, 1.0, 0.5, 0.0])  # any function of the slot, not only a line
    by_slot = f[slots]
    assert position.variance_shares(by_slot, slots) == pytest.approx((0.0, 1.0, 0.0), abs=1e-12)
    assert slot_test.slot_share(by_slot, slots) == pytest.approx(1.0, abs=1e-12)
    identity = np.tile(float(n) - np.arange(n), (b, 1))  # n - first-stage rank, whatever the presentation
    assert position.variance_shares(identity, slots) == pytest.approx((1.0, 0.0, 0.0), abs=1e-12)
    assert slot_test.slot_share(identity, slots) == 0.0
    blocks = [(f[slots] + 0.01 * q, slots) for q in range(4)]
    slot_run = slot_test.slot_permutation_test(blocks)
    assert slot_run.observed == pytest.approx(1.0) and slot_run.p_value == pytest.approx(1 / 1000)
    identity_run = slot_test.slot_permutation_test([(identity, slots)] * 4)
    assert identity_run.observed == 0.0 and identity_run.p_value == 1.0  # every null share ties at 0


def test_a_weak_slot_effect_under_doc_effects_and_noise_is_found():
    rng = np.random.default_rng(7)
    blocks = []
    for _ in range(8):
        slots = random_design(rng, 6, 12, 4)
        scores = 2.0 * rng.normal(size=12)[None, :] - 0.3 * slots + 0.5 * rng.normal(size=(6, 12))
        blocks.append((scores, slots))
    res = slot_test.slot_permutation_test(blocks)
    assert res.p_value < 0.01 and res.queries == 8 and res.permutations == 999
    assert res.observed > res.null_mean


def _null_dataset(rng: np.random.Generator, queries: int = 5, m: int = 4, n: int = 8, b: int = 4):
    """Scores that follow the document and noise, drawn independently of the slots (no slot effect)."""
    out = []
    for _ in range(queries):
        slots = random_design(rng, m, n, b)
        out.append((rng.normal(size=n)[None, :] + rng.normal(size=(m, n)), slots))
    return out


def test_p_values_are_uniform_under_the_null():
    rng = np.random.default_rng(2024)
    p = np.array([slot_test.slot_permutation_test(_null_dataset(rng), seed=i).p_value for i in range(200)])
    assert kstest(p, "uniform").pvalue > 0.01
    lo, hi = binom.interval(0.999, 200, 0.05)
    assert lo <= (p < 0.05).sum() <= hi


def _exact_null_mean(scores: np.ndarray, slots: np.ndarray) -> float:
    """E over within-document permutations of the slot share, in closed form: with P the projection
    on the document-centred slot indicators, sum_d S_d trace(P_dd) / ((M - 1) SS_total)."""
    m, n = scores.shape
    q = slot_test.slot_basis(slots).reshape(m, n, -1)
    e = scores - scores.mean(axis=0, keepdims=True)
    total = ((scores - scores.mean()) ** 2).sum()
    trace_dd = (q ** 2).sum(axis=(0, 2))  # diagonal of P summed over each document's rows
    return float(((e ** 2).sum(axis=0) * trace_dd).sum() / ((m - 1) * total))


def test_the_null_mean_matches_its_closed_form():
    rng = np.random.default_rng(11)
    slots = random_design(rng, 5, 10, 5)
    scores = rng.normal(size=10)[None, :] * 3 + rng.normal(size=(5, 10)) + 0.2 * slots
    res = slot_test.slot_permutation_test([(scores, slots)], permutations=20000, seed=3)
    assert res.null_mean == pytest.approx(_exact_null_mean(scores, slots), rel=0.02)


def test_the_chance_level_is_exact_over_every_order_of_the_scores():
    """Brute force: the mean slot share over all 6! orders of a fixed score vector equals r / (N - 1)."""
    rng = np.random.default_rng(5)
    slots = np.array([[0, 1, 0], [1, 0, 1]])  # M = 2, n = 3, B = 2
    y = rng.normal(size=6)
    shares = [slot_test.slot_share(y[list(p)].reshape(2, 3), slots) for p in itertools.permutations(range(6))]
    assert np.mean(shares) == pytest.approx(slot_test.slot_share_chance(slots), abs=1e-12)
    assert slot_test.slot_share_chance(slots) == pytest.approx(1 / 5)  # r = 1 slot contrast, N - 1 = 5


@pytest.mark.parametrize("m,want", [(3, 19 / 59), (10, 19 / 199)])
def test_the_chance_level_of_a_pure_noise_scorer_by_simulation(m, want):
    """A pool of 20 in one prompt of 20 (the issue measured about 0.32 at M = 3, 0.095 at M = 10)."""
    rng = np.random.default_rng(m)
    slots = random_design(rng, m, 20, 20)
    assert slot_test.slot_share_chance(slots) == pytest.approx(want, abs=1e-12)
    sims = np.array([slot_test.slot_share(rng.normal(size=(m, 20)), slots) for _ in range(2000)])
    assert abs(sims.mean() - want) < 4 * sims.std(ddof=1) / math.sqrt(sims.size)


def test_the_clustered_interval_matches_a_loop_by_loop_bootstrap():
    rng = np.random.default_rng(9)
    blocks = [(rng.normal(size=(3, 7)) + 0.3 * (s := random_design(rng, 3, 7, 3)), s) for _ in range(6)]
    got = slot_test.clustered_slot_intervals(blocks, resamples=300, seed=17)
    draws = np.random.default_rng(17).integers(0, 6, size=(300, 6))  # the same stream of query draws
    means = np.empty((300, 3))
    for r, idx in enumerate(draws):
        rows = [(sl.ravel(), (sc - sc.mean(axis=0)).ravel()) for sc, sl in (blocks[i] for i in idx)]
        slot = np.concatenate([a for a, _ in rows])
        dev = np.concatenate([b for _, b in rows])
        means[r] = [dev[slot == s].mean() for s in range(3)]
    assert got["slot"] == [0.0, 1.0, 2.0]
    assert got["low"] == pytest.approx(list(np.percentile(means, 2.5, axis=0)), abs=1e-12)
    assert got["high"] == pytest.approx(list(np.percentile(means, 97.5, axis=0)), abs=1e-12)
    assert got["centred_mean"] == pytest.approx(position.slot_profile(blocks)["centred_mean"], abs=1e-12)


def _widths(blocks):
    naive = position.slot_profile(blocks)
    clustered = slot_test.clustered_slot_intervals(blocks)
    return (np.array(clustered["high"]) - np.array(clustered["low"])) / (2 * np.array(naive["centred_ci95"]))


def test_the_clustered_interval_is_wider_than_the_naive_one_on_clustered_data():
    rng = np.random.default_rng(21)
    clustered, independent = [], []
    for _ in range(30):
        slots = random_design(rng, 6, 12, 4)
        docs = rng.normal(size=12)[None, :]
        # Each query has its own slot slope: rows of one query move together.
        clustered.append((docs + rng.normal() * slots + 0.3 * rng.normal(size=(6, 12)), slots))
        independent.append((docs + rng.normal(size=(6, 12)), slots))
    ratio_clustered, ratio_independent = _widths(clustered), _widths(independent)
    assert (ratio_clustered > 2).all()
    assert (ratio_independent > 0.7).all() and (ratio_independent < 1.4).all()


def test_one_query_gives_no_clustered_interval_and_no_query_no_test():
    slots = cyclic_design(3, 6, 3)
    got = slot_test.clustered_slot_intervals([(slots.astype(float), slots)])
    assert got["centred_mean"] == pytest.approx([-1.0, 0.0, 1.0])
    assert all(math.isnan(v) for v in got["low"] + got["high"])
    empty = slot_test.slot_permutation_test([(np.ones((3, 6)), slots)])  # constant scores: share undefined
    assert empty.queries == 0 and math.isnan(empty.p_value) and math.isnan(empty.chance)
