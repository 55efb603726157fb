"""Matched retention in the paper's form (presdep.metrics.matched_reference) on hand-built scores:
the target from single-order's t*, the re-tuned threshold with ties to the higher value, Jaccard
and set flip at it on the test half, and a case where presdep's per-shuffle top-n form differs."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from presdep.metrics import decisions
from presdep.metrics.matched_reference import matched_threshold, mean_retention, reference_rows


def _scores(per_query: dict[str, list[list[float]]]) -> pl.DataFrame:
    rows = []
    for q, presentations in per_query.items():
        for m, scores in enumerate(presentations):
            for pos, (d, s) in enumerate(zip("abcd", scores)):
                rows.append({"query_id": q, "doc_id": d, "perturbation": "random_shuffle", "presentation": m,
                             "position": pos, "prompt": 0, "slot": pos, "score": s})
    return pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))


GRID = [0.0, 0.25, 0.5, 0.75, 1.0]
REFERENCE = _scores({"dev": [[0.9, 0.8, 0.2, 0.1]] * 2, "t1": [[0.9, 0.1, 0.1, 0.1]] * 2,
                     "t2": [[0.9, 0.1, 0.1, 0.1]] * 2})
ARM = _scores({
    "dev": [[0.6, 0.4, 0.3, 0.1]] * 3,
    "t1": [[0.7, 0.6, 0.2, 0.1], [0.7, 0.4, 0.6, 0.1], [0.3, 0.2, 0.1, 0.0]],
    "t2": [[0.3, 0.2, 0.1, 0.0]] * 3,  # nothing reaches 0.5 in any shuffle
})
SPLIT = {"dev_queries": ["dev"], "test_queries": ["t1", "t2"]}


def test_the_closest_retention_wins_and_a_tie_goes_to_the_higher_threshold():
    dev = [np.array([0.6, 0.4, 0.3, 0.1])]
    # retention 1, 0.75, 0.25, 0, 0 on the grid; target 0.5: 0.25 and 0.5 are 0.25 away, 0.5 wins
    assert matched_threshold(GRID, dev, 0.5) == (0.5, 0.25)
    assert matched_threshold(GRID, dev, 0.8) == (0.25, 0.75)
    assert mean_retention([np.array([1.0, 0.0]), np.array([1.0, 1.0, 1.0, 0.0])], 0.5) == pytest.approx(0.625)


def test_the_papers_form_on_hand_values_and_where_presdeps_form_differs():
    rows = reference_rows(ARM, {**SPLIT, "grid": GRID, "t_star": 0.65}, REFERENCE, {**SPLIT, "t_star": 0.5})
    got = {(q, m): v for q, m, v in zip(rows.qid, rows.metric, rows.value)}
    assert got[(None, "target_retention")] == 0.5  # single-order keeps 2 of 4 dev documents at its t*
    assert (got[(None, "t_matched")], got[(None, "dev_retention")]) == (0.5, 0.25)
    # t1 at 0.5: {a, b}, {a, c}, {}: Jaccard (1/3 + 0 + 0) / 3; every ever-retained document flips
    assert got[("t1", "jaccard")] == pytest.approx(1 / 9) and got[("t1", "set_flip")] == 1.0
    # t2 keeps nothing anywhere: two empty sets are equal (Jaccard 1); set flip is undefined, presdep's 0
    assert got[("t2", "jaccard")] == 1.0 and got[("t2", "set_flip")] is None and got[("t2", "set_flip_zero")] == 0.0
    assert got[(None, "set_flip")] == 1.0 and got[(None, "jaccard")] == pytest.approx((1 / 9 + 1) / 2)
    # presdep's form on t1: every shuffle keeps as many as the canonical one at the arm's t* 0.65 (1): a, a, a
    t1 = np.array([[0.7, 0.6, 0.2, 0.1], [0.7, 0.4, 0.6, 0.1], [0.3, 0.2, 0.1, 0.0]])
    presdeps, _ = decisions.pair_stats(decisions.matched_kept(t1, np.tile(np.arange(4), (3, 1)), 1))
    assert presdeps == 1.0 and not math.isclose(presdeps, got[("t1", "jaccard")])
