"""Order-averaged quality (presdep.metrics.order_averaged) against hand-computed nDCG (trec_eval's
linear gains, log2 discounts): mean scores over the shuffles, ties by first-stage rank."""

from __future__ import annotations

import math

import numpy as np
import pytest

from presdep.metrics.blocks import Block
from presdep.metrics.order_averaged import add_order_averaged_rows, first_stage_ranks
from presdep.metrics.rows import MetricRows

QRELS = {"q": {"d1": 0, "d2": 1, "d3": 2}}


def _rows(shuffles, first_positions, task="rerank", k_averaged=10):
    docs = ["d1", "d2", "d3"]
    bl = [Block("q", docs, np.arange(len(shuffles)), np.array(shuffles, float), np.zeros((len(shuffles), 3), int))]
    first = first_stage_ranks([Block("q", docs, np.array([0]), np.zeros((1, 3)), np.array([first_positions]))])
    rows = MetricRows()
    add_order_averaged_rows(rows, "random_shuffle", bl, first, QRELS, task, k_averaged)
    return {(q, m): v for q, m, v in zip(rows.qid, rows.metric, rows.value)}


def test_tied_means_are_ranked_by_first_stage_rank():
    # means (2, 2, 2): first-stage order d1, d2, d3 -> DCG 1/log2(3) + 2/log2(4); ideal 2 + 1/log2(3)
    got = _rows([[1, 2, 3], [3, 2, 1]], [0, 1, 2])
    want = (1 / math.log2(3) + 2 / 2) / (2 + 1 / math.log2(3))
    assert got[("q", "ndcg10_order_averaged")] == pytest.approx(want, abs=1e-12)
    assert got[(None, "ndcg10_order_averaged")] == pytest.approx(want, abs=1e-12)
    # the reverse first stage puts d3 first: the ideal ranking
    assert _rows([[1, 2, 3], [3, 2, 1]], [2, 1, 0])[("q", "ndcg10_order_averaged")] == pytest.approx(1.0)


def test_only_the_first_k_shuffles_are_averaged_and_k_is_recorded():
    # the first two shuffles rank d3 > d2 > d1 (ideal); the third alone would rank d1 first
    got = _rows([[0, 1, 2], [0, 1, 2], [9, 0, 0]], [0, 1, 2], k_averaged=2)
    assert got[("q", "ndcg10_order_averaged")] == pytest.approx(1.0) and got[(None, "order_averaged_k")] == 2.0
    responses = _rows([[0, 1, 2], [9, 0, 0], [9, 0, 0]], [0, 1, 2], task="response")
    assert responses[("q", "ndcg1_order_averaged")] == 0.0  # means (6, 1/3, 2/3): d1 (grade 0) on top
