"""tau-PSI against brute-force scipy.stats.kendalltau over all pairs; Zeng PSI by hand."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from presdep.metrics import instability as ins


def brute_tau_psi(block: np.ndarray) -> float:
    """Mean of scipy's tau-b (= tau-a without ties) over all presentation pairs."""
    m = block.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on constant input (tau undefined)
        taus = [scipy.stats.kendalltau(block[a], block[b]).statistic for a, b in itertools.combinations(range(m), 2)]
    return float(np.clip((1 - np.mean(taus)) / 2, 0, 1))


@st.composite
def blocks(draw, ties: bool):
    m = draw(st.integers(2, 6))
    n = draw(st.integers(2, 14))
    if ties:
        vals = st.integers(0, 3).map(float)
        rows = [draw(st.lists(vals, min_size=n, max_size=n)) for _ in range(m)]
        return np.array(rows)
    perms = [draw(st.permutations(range(n))) for _ in range(m)]
    return np.array(perms, dtype=float) + draw(st.floats(-5, 5))


@settings(max_examples=150, deadline=None)
@given(blocks(ties=False))
def test_tau_psi_equals_brute_force_without_ties(block):
    assert ins.tau_psi(block) == pytest.approx(brute_tau_psi(block), abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(blocks(ties=True))
def test_tau_psi_equals_brute_force_tau_b_with_ties(block):
    expected = brute_tau_psi(block)
    got = ins.tau_psi(block)
    if math.isnan(expected):  # a presentation with all scores equal: tau-b undefined
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(blocks(ties=False), min_size=1, max_size=6), st.lists(blocks(ties=True), max_size=4))
def test_batched_over_queries_equals_per_query(strict, tied):
    many = strict + tied
    got = ins.tau_psi_many(many)
    for g, b in zip(got, many):
        e = ins.tau_psi(b)
        assert (math.isnan(g) and math.isnan(e)) or g == pytest.approx(e, abs=1e-12)


def test_c_ij_identity_equals_gram_tau_b_on_strict_rankings():
    rng = np.random.default_rng(3)
    s = rng.random((20, 7, 30))
    np.testing.assert_allclose(ins._mean_tau_a_strict(s), ins._mean_tau_b(s), atol=1e-12)


def test_chunking_does_not_change_results(monkeypatch):
    rng = np.random.default_rng(4)
    s = rng.random((11, 4, 12))
    t = rng.integers(0, 3, (11, 4, 12)).astype(float)
    full = (ins.mean_pairwise_tau(s), ins.mean_pairwise_tau(t))
    monkeypatch.setattr(ins, "_CHUNK_BYTES", 1)  # one query per chunk
    np.testing.assert_allclose(ins.mean_pairwise_tau(s), full[0])
    np.testing.assert_allclose(ins.mean_pairwise_tau(t), full[1])


def test_identity_gives_zero_reversal_gives_one_random_gives_half():
    ident = np.tile(np.linspace(0, 1, 50), (8, 1))
    assert ins.tau_psi(ident) == 0.0
    assert ins.tau_psi(np.stack([ident[0], ident[0][::-1]])) == 1.0
    rng = np.random.default_rng(0)
    psi = ins.tau_psi(rng.random((200, 10, 100)))
    assert psi.shape == (200,)
    assert abs(psi.mean() - 0.5) < 0.005


def test_undefined_cases_are_nan():
    assert math.isnan(ins.tau_psi(np.array([[3.0, 1.0, 2.0]])))  # M = 1: no pair
    assert math.isnan(ins.tau_psi(np.array([[1.0], [2.0]])))  # n = 1
    assert math.isnan(ins.tau_psi(np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]])))  # constant ranking
    with pytest.raises(ValueError, match="NaN"):
        ins.tau_psi(np.array([[np.nan, 1.0], [1.0, 2.0]]))


def test_position_bucket_thirds():
    got = ins.position_bucket(np.array([0, 33, 34, 50, 66, 67, 99]), 100)
    assert got.tolist() == [0, 0, 1, 1, 1, 2, 2]
    # middle injection's index n // 2 is the middle third, its ends the outer thirds
    for n in range(3, 40):
        assert ins.position_bucket(np.array([0, n // 2, n - 1]), n).tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        ins.position_bucket(5, 5)


def test_zeng_psi_hand_examples():
    # buckets: top {0.5, 0.6}, middle {0.4}, bottom {0.3} -> 1 - 0.3 / 0.55
    assert ins.zeng_psi(np.array([0.5, 0.4, 0.3, 0.6]), np.array([0, 1, 2, 0])) == pytest.approx(1 - 0.3 / 0.55)
    # empty middle bucket: min/max over the two non-empty ones
    assert ins.zeng_psi(np.array([0.8, 0.4, 0.6]), np.array([0, 2, 0])) == pytest.approx(1 - 0.4 / 0.7)
    # a single non-empty bucket shows no positional contrast: undefined
    assert math.isnan(ins.zeng_psi(np.array([0.8, 0.4]), np.array([1, 1])))
    # METHODS: every bucket mean 0 -> min/max is 0/0, undefined (null), not 0
    assert math.isnan(ins.zeng_psi(np.zeros(3), np.array([0, 1, 2])))
    assert math.isnan(ins.zeng_psi(np.zeros(2), np.array([0, 2])))
    # one bucket at 0, another above: defined, 1 - 0 / 0.5 = 1
    assert ins.zeng_psi(np.array([0.0, 0.5]), np.array([0, 2])) == 1.0
    # equal buckets -> 0
    assert ins.zeng_psi(np.array([0.5, 0.5, 0.5]), np.array([0, 1, 2])) == 0.0


def test_zeng_psi_corpus_form():
    means = np.array([[0.6, 0.3, np.nan], [0.4, 0.5, 0.2]])
    # bucket averages: top 0.5, middle 0.4, bottom 0.2 (only the second query has it)
    assert ins.zeng_psi_corpus(means) == pytest.approx(1 - 0.2 / 0.5)
    # differs from the mean of per-query values: a different quantity
    per_query = np.nanmean([ins.zeng_from_bucket_means(m) for m in means])
    assert per_query != pytest.approx(ins.zeng_psi_corpus(means))
    # every bucket average 0 over the corpus: undefined (null)
    assert math.isnan(ins.zeng_psi_corpus(np.array([[0.0, 0.0, np.nan], [0.0, np.nan, 0.0]])))
    assert math.isnan(ins.zeng_from_bucket_means(np.array([0.0, 0.0, 0.0])))
