"""The score-grade test (presdep.metrics.position.score_grade_p_value): one-sided, grades permuted
within queries. Against scipy's exact permutation test on one query, against the exact joint null
of two queries computed here by enumeration, and as the aggregate metrics row beside
spearman_score_grade."""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pytest
from scipy.stats import permutation_test, spearmanr

from presdep.metrics import position
from presdep.metrics.position_rows import GRADE_P_VALUE, add_position_rows
from presdep.metrics.rows import MetricRows


def _scores(grades: np.ndarray, slope: float, seed: int, shuffles: int = 3) -> np.ndarray:
    """(shuffles, n) scores that follow ``slope`` x grade plus noise."""
    rng = np.random.default_rng(seed)
    return slope * grades[None, :] + rng.normal(size=(shuffles, grades.size))


def test_one_query_is_scipys_exact_permutation_test_of_spearman():
    grades = np.array([0.0, 1.0, 3.0, 2.0, 0.0, 1.0])  # ties among the grades
    scores = _scores(grades, -0.6, seed=3)
    mean = scores.mean(axis=0)
    # one sample under "pairings": every one of the 6! orders of the grades against the fixed scores
    exact = permutation_test((grades,), lambda g: spearmanr(mean, g).statistic, permutation_type="pairings",
                             alternative="less", n_resamples=np.inf)
    assert exact.null_distribution.size == math.factorial(6)
    want = exact.pvalue
    assert spearmanr(mean, grades).statistic < 0  # the case the test is for
    assert position.score_grade_p_value([(scores, grades)]) == pytest.approx(want, abs=1e-12)


def test_four_documents_in_reverse_order_cannot_reject():
    """rho = -1, but only 1 of the 4! = 24 orders is as low: p = 1/24, above any usual alpha."""
    grades = np.array([3.0, 2.0, 1.0, 0.0])
    scores = np.tile(np.array([0.1, 0.2, 0.3, 0.4]), (2, 1))
    assert position.score_grade_spearman(scores, grades) == pytest.approx(-1.0)
    assert position.score_grade_p_value([(scores, grades)]) == pytest.approx(1 / 24, abs=1e-12)


def _exact_two_query_p(blocks) -> float:
    """Every joint order of two queries' grades, each query's rho from scipy, then the mean."""
    per_query = []
    for scores, grades in blocks:
        mean = scores.mean(axis=0)
        per_query.append(np.array([spearmanr(mean, grades[list(o)]).statistic
                                   for o in itertools.permutations(range(grades.size))]))
    observed = np.mean([spearmanr(s.mean(axis=0), g).statistic for s, g in blocks])
    null = (per_query[0][:, None] + per_query[1][None, :]) / 2
    return float((null <= observed + 1e-12).mean())


def test_two_queries_match_the_exact_joint_null_and_the_random_orders_approach_it():
    ga, gb = np.array([0.0, 0.0, 1.0, 2.0, 3.0, 1.0]), np.array([1.0, 0.0, 2.0, 0.0, 1.0])
    blocks = [(_scores(ga, -0.4, seed=5), ga), (_scores(gb, -0.4, seed=6), gb)]
    exact = _exact_two_query_p(blocks)
    assert 0.001 < exact < 0.5  # neither trivially small nor large
    # 720 x 120 = 86,400 joint orders: enumerated when allowed, else 9,999 random ones
    assert position.score_grade_p_value(blocks, permutations=100_000) == pytest.approx(exact, abs=1e-12)
    sampled = position.score_grade_p_value(blocks)
    assert abs(sampled - exact) < 4 * math.sqrt(exact * (1 - exact) / position.GRADE_PERMUTATIONS) + 1e-4
    assert position.score_grade_p_value(blocks) == sampled  # seeded: the same scores, the same p


def test_queries_without_a_defined_rho_are_left_out():
    flat = (np.ones((2, 4)), np.array([0.0, 1.0, 2.0, 3.0]))       # constant score
    ungraded = (np.arange(8.0).reshape(2, 4), np.zeros(4))          # constant grades
    assert math.isnan(position.score_grade_p_value([flat, ungraded]))
    reverse = (np.tile(np.array([0.1, 0.2, 0.3, 0.4]), (2, 1)), np.array([3.0, 2.0, 1.0, 0.0]))
    assert position.score_grade_p_value([flat, reverse, ungraded]) == pytest.approx(1 / 24, abs=1e-12)


def test_the_p_value_is_an_aggregate_metrics_row_beside_the_spearman():
    """Eight queries of 8 documents whose scores fall with the grade: rho < 0 and p tiny."""
    rows = {"query_id": [], "doc_id": [], "presentation": [], "slot": [], "score": []}
    qrels, rng = {}, np.random.default_rng(0)
    for q in range(8):
        grades = rng.integers(0, 4, size=8)
        qrels[f"q{q}"] = {f"d{d}": int(g) for d, g in enumerate(grades)}
        for m in range(3):
            for slot, d in enumerate(rng.permutation(8)):
                rows["query_id"].append(f"q{q}")
                rows["doc_id"].append(f"d{d}")
                rows["presentation"].append(m)
                rows["slot"].append(slot)
                rows["score"].append(-float(grades[d]) + rng.normal(scale=0.5))
    scores = pl.DataFrame(rows).with_columns(pl.lit("random_shuffle").alias("perturbation"))
    out = MetricRows()
    add_position_rows(out, scores, qrels)
    frame = out.frame(dataset="d", variant="v")
    got = dict(zip(frame.filter(pl.col("query_id").is_null())["metric"],
                   frame.filter(pl.col("query_id").is_null())["value"]))
    assert got["spearman_score_grade"] < -0.5
    blocks = position.query_blocks(rows, qrels)
    assert got[GRADE_P_VALUE] == position.score_grade_p_value([(sc, g) for _, sc, _, g in blocks])
    assert got[GRADE_P_VALUE] == pytest.approx(1 / (1 + position.GRADE_PERMUTATIONS))
    assert frame.filter(pl.col("metric") == GRADE_P_VALUE)["query_id"].to_list() == [None]  # aggregate only
