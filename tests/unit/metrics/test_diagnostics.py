"""METHODS v3 item 9 diagnostics by hand: where the gold paragraphs land in the reader's top k."""

from __future__ import annotations

import math

import numpy as np
import pytest

from presdep.metrics.blocks import Block
from presdep.metrics.qa_rows import add_gold_slot_rows
from presdep.metrics.rows import MetricRows


def _block(qid, docs, orders, scores=None):
    """One query's presentations from the presented orders (doc lists); by default the score
    falls with the presented position, so the score order is the presented order."""
    pos = np.array([[order.index(d) for d in docs] for order in orders])
    sc = -pos.astype(float) if scores is None else np.asarray(scores, dtype=float)
    return Block(qid, docs, np.arange(len(orders)), sc, pos)


def _rows_of(rows: MetricRows) -> dict[tuple[str | None, str], float | None]:
    return {(q, m): v for q, m, v in zip(rows.qid, rows.metric, rows.value)}


def test_gold_in_top_k_needs_one_gold_and_the_slot_is_the_best_placed_gold():
    docs = ["a", "b", "c", "d"]
    qrels = {"q": {"a": 2, "c": 1, "d": 0}, "never": {"d": 1}, "none": {"a": 0}}
    blocks = [
        _block("q", docs, [["a", "b", "c", "d"],    # best gold a at slot 0: in the top 2
                           ["b", "d", "c", "a"],    # best gold c at slot 2: not in the top 2
                           ["b", "c", "a", "d"]]),  # best gold c at slot 1: in the top 2
        _block("never", docs, [["a", "b", "c", "d"], ["b", "a", "c", "d"]]),  # gold d never in the top 2
        _block("none", docs, [["a", "b", "c", "d"], ["d", "c", "b", "a"]]),   # no gold paragraph
    ]
    rows = MetricRows()
    add_gold_slot_rows(rows, "random_shuffle", blocks, qrels, k=2)
    got = _rows_of(rows)
    # at least one gold in the top 2 in presentations 0 and 2 (v2's "every gold" gave 0 of 3)
    assert got[("q", "gold_in_top2")] == pytest.approx(2 / 3)
    # slots 0 and 1 of the presentations where the best gold is in the top 2: mean 0.5,
    # population variance ((0 - 0.5)^2 + (1 - 0.5)^2) / 2 = 0.25
    assert got[("q", "gold_slot_mean")] == pytest.approx(0.5)
    assert got[("q", "gold_slot_var")] == pytest.approx(0.25)
    # never in the top k: share 0, slot mean and variance undefined (null)
    assert got[("never", "gold_in_top2")] == 0.0
    assert got[("never", "gold_slot_mean")] is None and got[("never", "gold_slot_var")] is None
    # a query without a gold paragraph is left out; the aggregates skip the nulls
    assert not any(q == "none" for q, _ in got)
    assert got[(None, "gold_in_top2")] == pytest.approx((2 / 3 + 0) / 2)
    assert got[(None, "gold_slot_mean")] == pytest.approx(0.5)


def test_gold_slot_ties_go_to_the_paragraph_shown_first():
    docs = ["a", "b", "c"]
    # every score equal: the score order is the presented order
    b = _block("q", docs, [["b", "c", "a"], ["a", "b", "c"]], scores=np.zeros((2, 3)))
    rows = MetricRows()
    add_gold_slot_rows(rows, "random_shuffle", [b], {"q": {"a": 1}}, k=1)
    got = _rows_of(rows)
    assert got[("q", "gold_in_top1")] == 0.5  # a shown last, then first
    assert got[("q", "gold_slot_mean")] == 0.0 and got[("q", "gold_slot_var")] == 0.0
    assert not math.isnan(got[(None, "gold_slot_mean")])
