"""The degenerate-decision flags of the retained-set threshold and the tie rate, by hand.

Every rule of docs/methods/jaccard.md#when-the-number-means-nothing (t* at the grid's edge,
mean test-half retention above 0.90 / below 0.10, fewer than 10 test queries) and the tie
rate of docs/methods/tau-psi.md#ties is checked on constructed blocks whose answer is
counted by hand, and end to end through compute_metrics.
"""

from __future__ import annotations

import itertools
import logging
import math

import numpy as np
import polars as pl
import pytest

from presdep.metrics import rerank_rows as rr
from presdep.metrics.blocks import Block
from presdep.metrics.compute import compute_metrics, tie_rate
from presdep.metrics.rows import MetricRows


def block(qid: str, scores) -> Block:
    """One query's (M, n) presentations; docs d0..d{n-1}, presented in column order."""
    s = np.asarray(scores, dtype=float)
    m, n = s.shape
    return Block(qid, [f"d{i}" for i in range(n)], np.arange(m), s, np.tile(np.arange(n), (m, 1)))


def artifact(t_star: float, **extra) -> dict:
    return {"t_star": t_star, "split_seed": 1, "canonical_presentation": 0, "dev_queries": [],
            "test_queries": [], "grid_size": 41, **extra}


def aggregate(rows: MetricRows) -> dict[str, float | None]:
    return {m: v for p, q, m, v in zip(rows.pert, rows.qid, rows.metric, rows.value)
            if q is None and p == "random_shuffle"}


def flags_of(thr: dict, blocks: list[Block]) -> dict[str, float | None]:
    rows = MetricRows()
    rr.add_threshold_rows(rows, thr, blocks, {}, {b.query_id for b in blocks})
    return aggregate(rows)


# ------------------------------------------------------------------ stated thresholds


def test_the_thresholds_are_the_stated_ones():
    assert rr.RETENTION_HIGH == 0.90 and rr.RETENTION_LOW == 0.10 and rr.MIN_TEST_QUERIES == 10
    assert list(rr.DEGENERATE_FLAGS) == ["warn_threshold_keeps_all", "warn_threshold_keeps_none",
                                         "warn_threshold_grid_edge", "warn_retention_high",
                                         "warn_retention_low", "warn_few_test_queries"]
    assert rr.DEGENERATE_FLAGS["warn_retention_high"] == "mean retention above 0.90"
    assert rr.DEGENERATE_FLAGS["warn_few_test_queries"] == "fewer than 10 test queries"


# ------------------------------------------------------------------------ grid edge


GRID = [0.0, 0.25, 0.5, 0.75, 1.0]
TEN = [block(f"q{i}", [[0.1, 0.6, 0.9], [0.9, 0.1, 0.6]]) for i in range(10)]  # 10 test queries


@pytest.mark.parametrize("t_star, edge", [(0.0, 1.0), (1.0, 1.0), (0.25, 0.0), (0.5, 0.0), (0.75, 0.0)])
def test_grid_edge_is_the_first_or_last_grid_value(t_star, edge):
    assert flags_of(artifact(t_star, grid=GRID), TEN)["warn_threshold_grid_edge"] == edge
    # an artifact with only the span (grid_min, grid_max) decides it the same way
    assert flags_of(artifact(t_star, grid_min=0.0, grid_max=1.0), TEN)["warn_threshold_grid_edge"] == edge


def test_grid_edge_is_undecided_without_a_grid_and_raised_on_a_one_point_grid():
    assert flags_of(artifact(0.5), TEN)["warn_threshold_grid_edge"] is None
    assert flags_of(artifact(0.5, grid=[0.5] * 41), TEN)["warn_threshold_grid_edge"] == 1.0


def test_tuned_threshold_at_the_bottom_of_its_grid_is_flagged_end_to_end():
    """Every document relevant, so keeping everything is the best development F1 (1.0); the
    lowest canonical score (0.0) sits in a development query and every other score is >= 0.5,
    so only the grid's first value keeps everything: t* = grid[0] (checked by brute force)."""
    from presdep.metrics.thresholds import split_queries, tune_thresholds

    qids = [f"q{i:02d}" for i in range(24)]
    dev, _ = split_queries(qids)
    rng = np.random.default_rng(3)
    rows, qrels = [], []
    for q in qids:
        base = 0.5 + 0.5 * rng.random(4)
        if q == dev[0]:
            base[0] = 0.0
        for pert, ms in (("first_stage", [0]), ("random_shuffle", [0, 1])):
            for m in ms:
                for pos, i in enumerate([0, 1, 2, 3] if m == 0 else [3, 2, 1, 0]):
                    rows.append({"query_id": q, "doc_id": f"d{i}", "perturbation": pert, "presentation": m,
                                 "position": pos, "prompt": 0, "slot": pos, "score": float(base[i])})
        qrels += [{"query_id": q, "doc_id": f"d{i}", "relevance": 1} for i in range(4)]
    scores = pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))
    qrels = pl.DataFrame(qrels, schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    art = tune_thresholds(scores, qrels)
    canon = {q: scores.filter((pl.col("query_id") == q) & (pl.col("perturbation") == "random_shuffle")
                              & (pl.col("presentation") == 0))["score"].to_list() for q in qids}

    def dev_f1(t):  # every doc relevant: precision 1, F1 = 2r / (1 + r) at recall r
        rec = [sum(x >= t for x in canon[q]) / 4 for q in art["dev_queries"]]
        return np.mean([0.0 if r == 0 else 2 * r / (1 + r) for r in rec])

    best = max(range(len(art["grid"])), key=lambda i: (dev_f1(art["grid"][i]), i))  # ties: the higher
    assert best == 0 and art["t_star"] == art["grid"][0] == 0.0
    metrics = compute_metrics(scores, qrels, dataset="a", task="rerank", variant="v", seed=None, thresholds=art)
    agg = metrics.filter(pl.col("query_id").is_null() & (pl.col("perturbation") == "random_shuffle"))
    value = dict(zip(agg["metric"], agg["value"]))
    assert value["warn_threshold_grid_edge"] == 1.0
    assert value["warn_threshold_keeps_all"] == 1.0  # and it keeps every test candidate
    assert value["warn_few_test_queries"] == 0.0  # 12 test queries


# ------------------------------------------------------------------------ retention


def ten_docs(kept_per_presentation: list[int]) -> Block:
    """A block of 10 documents whose presentation m keeps exactly kept[m] of them at t* = 0.5."""
    return block("q", [[1.0] * k + [0.0] * (10 - k) for k in kept_per_presentation])


@pytest.mark.parametrize("kept, high, low", [
    ([10, 9], 1.0, 0.0),   # 19/20 = 0.95 > 0.90
    ([9, 9], 0.0, 0.0),    # 0.90 exactly: not above
    ([10, 10], 1.0, 0.0),  # keeps every candidate, and retention 1.0
    ([1, 1], 0.0, 0.0),    # 0.10 exactly: not below
    ([1, 0], 0.0, 1.0),    # 1/20 = 0.05 < 0.10
    ([5, 4], 0.0, 0.0),    # 0.45
])
def test_retention_flags_by_hand(kept, high, low):
    flags = flags_of(artifact(0.5, grid=GRID), [ten_docs(kept)])
    assert flags["warn_retention_high"] == high and flags["warn_retention_low"] == low


def test_retention_is_the_mean_over_test_queries_of_the_mean_over_presentations():
    # q1 keeps 10 and 10 (1.0), q2 keeps 8 and 8 (0.8): mean 0.9, not above; q3 (dev half) is not counted
    q1, q2 = ten_docs([10, 10]), ten_docs([8, 8])
    q1, q2, q3 = block("q1", q1.scores), block("q2", q2.scores), block("q3", np.ones((2, 10)))
    rows = MetricRows()
    rr.add_threshold_rows(rows, artifact(0.5, grid=GRID), [q1, q2, q3], {}, {"q1", "q2"})
    assert aggregate(rows)["warn_retention_high"] == 0.0
    rows = MetricRows()
    rr.add_threshold_rows(rows, artifact(0.5, grid=GRID), [q1, q2, q3], {}, {"q1", "q3"})
    assert aggregate(rows)["warn_retention_high"] == 1.0  # (1.0 + 1.0) / 2


def test_no_test_query_in_the_scores_leaves_retention_undecided():
    flags = flags_of(artifact(0.5, grid=GRID), [])
    assert flags["warn_retention_high"] is None and flags["warn_retention_low"] is None
    assert flags["warn_few_test_queries"] == 1.0  # 0 < 10


# --------------------------------------------------------------------- test queries


@pytest.mark.parametrize("n, raised", [(1, 1.0), (9, 1.0), (10, 0.0), (11, 0.0)])
def test_few_test_queries_below_ten(n, raised):
    blocks = [block(f"q{i}", [[0.1, 0.9], [0.9, 0.1]]) for i in range(n)]
    assert flags_of(artifact(0.5, grid=GRID), blocks)["warn_few_test_queries"] == raised


def test_flags_reach_the_metrics_table_and_the_log(caplog):
    """compute_metrics writes every flag as an aggregate random_shuffle row and logs the raised ones."""
    docs = [f"d{i}" for i in range(10)]
    rows = []
    for q in ("q1", "q2", "q3"):
        for pert, ms in (("first_stage", [0]), ("random_shuffle", [0, 1])):
            for m in ms:
                for pos, i in enumerate(range(10) if m == 0 else range(9, -1, -1)):
                    rows.append({"query_id": q, "doc_id": docs[i], "perturbation": pert, "presentation": m,
                                 "position": pos, "prompt": 0, "slot": pos, "score": 0.1 * i})
    scores = pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))
    qrels = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "doc_id": ["d9"] * 3, "relevance": [1] * 3},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    # t* = 0.85 keeps only d9 (score 0.9): retention 1/10 = 0.1, not below; t* = 0.95 keeps none
    for t, expect in ((0.85, {"warn_retention_low": 0.0, "warn_threshold_keeps_none": 0.0}),
                      (0.95, {"warn_retention_low": 1.0, "warn_threshold_keeps_none": 1.0})):
        thr = artifact(t, grid=[0.0, t], dev_queries=["q1"], test_queries=["q2", "q3"])
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            m = compute_metrics(scores, qrels, dataset="a", task="rerank", variant="v", seed=None, thresholds=thr)
        agg = m.filter(pl.col("query_id").is_null() & (pl.col("perturbation") == "random_shuffle"))
        value = dict(zip(agg["metric"], agg["value"]))
        assert {k: value[k] for k in expect} == expect
        assert value["warn_threshold_grid_edge"] == 1.0  # t* is the grid's last value
        assert value["warn_few_test_queries"] == 1.0 and value["warn_retention_high"] == 0.0
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("fewer than 10 test queries" in msg for msg in messages)
        assert any("t* at the edge of its grid" in msg for msg in messages)
        assert any("mean retention below 0.10" in msg for msg in messages) == bool(expect["warn_retention_low"])


# ------------------------------------------------------------------------ tie rate


def brute_tie_rate(scores) -> float:
    per = []
    for row in scores:
        pairs = list(itertools.combinations(row, 2))
        per.append(sum(a == b for a, b in pairs) / len(pairs))
    return sum(per) / len(per)


def test_tie_rate_by_hand():
    # presentation 0: (1, 1, 2) ties one pair of three; presentation 1: (3, 3, 3) ties all three
    assert tie_rate(np.array([[1.0, 1.0, 2.0], [3.0, 3.0, 3.0]])) == pytest.approx((1 / 3 + 1) / 2)
    assert tie_rate(np.array([[0.1, 0.2, 0.3, 0.4]])) == 0.0
    assert tie_rate(np.array([[2.0, 2.0, 1.0, 1.0]])) == pytest.approx(2 / 6)
    assert math.isnan(tie_rate(np.array([[1.0], [1.0]])))  # one document: no pair


def test_tie_rate_matches_brute_force_on_integer_grades():
    rng = np.random.default_rng(7)
    for _ in range(50):
        m, n = rng.integers(1, 5), rng.integers(2, 9)
        s = rng.integers(0, 3, (m, n)).astype(float)
        assert tie_rate(s) == pytest.approx(brute_tie_rate(s.tolist()), abs=1e-12)


def test_tie_rate_rows_per_query_and_their_mean():
    """Per query under every decision perturbation, and the aggregate is the mean over queries."""
    rows = []
    grades = {"q1": [[1, 1, 2], [1, 1, 2]], "q2": [[0, 1, 2], [2, 1, 0]]}
    for q, per_m in grades.items():
        for pert, ms in (("first_stage", [0]), ("random_shuffle", [0, 1])):
            for m in ms:
                for pos, g in enumerate(per_m[m]):
                    rows.append({"query_id": q, "doc_id": f"d{pos}", "perturbation": pert, "presentation": m,
                                 "position": pos, "prompt": 0, "slot": pos, "score": float(g)})
    scores = pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["d2"], "relevance": [1]},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    m = compute_metrics(scores, qrels, dataset="a", task="response", variant="v", seed=None)
    tie = m.filter((pl.col("metric") == "tie_rate") & (pl.col("perturbation") == "random_shuffle"))
    got = dict(zip(tie["query_id"], tie["value"]))
    assert got["q1"] == pytest.approx(1 / 3) and got["q2"] == 0.0
    assert got[None] == pytest.approx((1 / 3 + 0.0) / 2)
