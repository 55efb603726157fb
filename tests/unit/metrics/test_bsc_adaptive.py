"""Adaptive BSC (docs/methods/bsc.md, "Adaptive BSC") against hand-worked cases and a brute-force
oracle written here from the method's text: running means by np.mean over prefixes, retained sets
as Python sets, the fixed-K decision from the BSC view of presdep.contracts.views."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from presdep.contracts.views import decision_presentations
from presdep.metrics import bsc_adaptive as ad
from presdep.metrics import compute as cm
from presdep.metrics.bsc import curve_rows

QRELS = pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["a", "x"], "relevance": [1, 1]},
                     schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})


def _rows(qid, pert, pres, docs_in_order, scores):
    return [{"query_id": qid, "doc_id": d, "perturbation": pert, "presentation": pres, "position": p,
             "prompt": 0, "slot": p, "score": float(s)} for p, (d, s) in enumerate(zip(docs_in_order, scores))]


def table(per_query: dict[str, tuple[list[str], list[list[float]]]]) -> pl.DataFrame:
    """A scores table: per query its doc ids and one score row per stored shuffle (doc order);
    shuffle m shows the docs rotated by m, so positions vary as in a real run."""
    rows = []
    for q, (docs, shuffles) in per_query.items():
        rows += _rows(q, "first_stage", 0, docs, [0.0] * len(docs))
        for m, sc in enumerate(shuffles):
            order = [(i + m) % len(docs) for i in range(len(docs))]
            rows += _rows(q, "random_shuffle", m, [docs[i] for i in order], [sc[i] for i in order])
    return pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))


def agg(rows, pert, metric):
    hit = [v for p, q, m, v in rows if p == pert and m == metric and q is None]
    assert len(hit) == 1, (pert, metric, hit)
    return hit[0]


# --- the stopping rule, by hand -----------------------------------------------------------------

def test_decision_settling_after_two_shuffles_stops_at_three_with_r1():
    # decisions after 1, 2, 3, 4 shuffles: A, B, B, B -> the 3rd addition leaves B unchanged
    path = np.array([[1, 0], [0, 1], [0, 1], [0, 1]], dtype=bool)
    assert ad.stopping_point(path, 1) == (3, True)
    assert ad.stopping_point(path, 2) == (4, True)  # B unchanged by additions 3 and 4
    assert ad.stopping_point(path, 3) == (4, False)  # needs 5 shuffles: the cap, unsettled


def test_a_decision_that_never_settles_uses_the_cap():
    path = np.array([0, 1, 0, 1, 0, 1])
    assert ad.stopping_point(path, 1) == (6, False)
    out = ad.adaptive_outcome(path, 1)
    assert (out.shuffles, out.capped, out.agrees) == (6, True, True)  # the cap IS fixed K


def test_a_decision_stable_from_the_start_stops_at_r_plus_one():
    path = np.zeros((10, 3), dtype=bool)
    assert [ad.stopping_point(path, r)[0] for r in (1, 2, 3, 9, 10)] == [2, 3, 4, 10, 10]
    assert ad.stopping_point(path, 9) == (10, True) and ad.stopping_point(path, 10) == (10, False)
    with pytest.raises(ValueError, match="r >= 1"):
        ad.stopping_point(path, 0)


def test_running_means_against_prefix_means():
    s = np.random.default_rng(3).random((7, 5))
    want = np.stack([s[:k].mean(axis=0) for k in range(1, 8)])
    np.testing.assert_allclose(ad.running_means(s), want, rtol=1e-12)


def test_retained_path_and_outcome_by_hand():
    # 3 docs, K = 4 shuffles, t* = 0.5. Running means:
    #   doc0: 0.9, 0.7, 0.6, 0.525   doc1: 0.2, 0.6, 0.5, 0.45   doc2: 0.1, 0.1, 0.1, 0.1
    # retained: {0}, {0, 1}, {0, 1}, {0}: r = 1 stops at 3 with {0, 1}; fixed K = 4 retains {0}.
    s = np.array([[0.9, 0.2, 0.1], [0.5, 1.0, 0.1], [0.4, 0.3, 0.1], [0.3, 0.3, 0.1]])
    path = ad.retained_path(s, 0.5)
    assert path.tolist() == [[True, False, False], [True, True, False], [True, True, False], [True, False, False]]
    out = ad.adaptive_outcome(path, 1)
    assert (out.shuffles, out.capped, out.agrees) == (3, False, False)
    assert out.jaccard == pytest.approx(1 / 2)  # {0, 1} vs {0}
    out2 = ad.adaptive_outcome(path, 2)  # needs 2 unchanged additions: addition 4 changes it -> cap
    assert (out2.shuffles, out2.capped, out2.agrees, out2.jaccard) == (4, True, True, 1.0)


def test_two_empty_retained_sets_have_jaccard_one():
    out = ad.adaptive_outcome(np.zeros((3, 4), dtype=bool), 1)
    assert (out.shuffles, out.agrees, out.jaccard) == (2, True, 1.0)


def test_selection_path_breaks_ties_by_response_id_ascending():
    # running means: k=1 (1, 1, 0), a tie of indices 0 and 1 won by the smaller id; k=2 (0.5, 1, 0): index 1
    s = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    assert ad.selection_path(s, ["r2", "r1", "r3"]).tolist() == [1, 1]  # index 1 is "r1": wins the tie
    assert ad.selection_path(s, ["r1", "r2", "r3"]).tolist() == [0, 1]


# --- the rows: passes and agreement computed by hand -------------------------------------------

THR = {"t_star": 0.5, "dev_queries": ["q9"], "test_queries": ["q1", "q2"]}


def hand_table() -> pl.DataFrame:
    """K = 4, E = 2. q1 ensemble 0: the by-hand case above (stops at 3, disagrees, Jaccard 1/2);
    q1 ensemble 1: constant (stops at 2, agrees); q2 ensemble 0: x's running mean touches t* exactly
    (1, 0.5, 0.667, 0.5: kept throughout, stops at 2); q2 ensemble 1: {} then {x} for good (r = 1: stops
    at 3, agrees); q9 is a dev query (left out)."""
    q1 = [[0.9, 0.2, 0.1], [0.5, 1.0, 0.1], [0.4, 0.3, 0.1], [0.3, 0.3, 0.1]] + [[0.8, 0.0, 0.0]] * 4
    q2 = [[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]] + [[0.0, 0.0], [1.5, 0.0], [0.6, 0.0], [0.9, 0.0]]
    q9 = [[0.0, 1.0]] * 8
    return table({"q1": (["a", "b", "c"], q1), "q2": (["x", "y"], q2), "q9": (["u", "v"], q9)})


def test_adaptive_rows_by_hand():
    # q2 ensemble 0 running means of x: 1, 0.5, 0.667, 0.5 -> kept at every k (score >= t*): stops at r + 1.
    # q2 ensemble 1 running means of x: 0, 0.75, 0.7, 0.75 -> {}, {x}, {x}, {x}: r = 1 stops at 3, agrees;
    #   r = 2 stops at 4 (settled); r = 3 at the cap (unsettled).
    rows = list(ad.adaptive_rows(hand_table(), task="rerank", bsc_k=4, ensembles=2, rs=(1, 2, 3), thresholds=THR))
    # r = 1: q1 (3, 2) -> 2.5; q2 (2, 3) -> 2.5; mean 2.5 shuffles of 4
    assert agg(rows, "bsc_adaptive_r1", "shuffles_mean") == pytest.approx(2.5)
    assert agg(rows, "bsc_adaptive_r1", "passes_saved") == pytest.approx(1 - 2.5 / 4)
    assert agg(rows, "bsc_adaptive_r1", "passes_per_query") == pytest.approx(2 * 2.5 + 1)
    assert agg(rows, "bsc_adaptive_r1", "agreement") == pytest.approx((0.5 + 1.0) / 2)  # q1 1 of 2, q2 2 of 2
    assert agg(rows, "bsc_adaptive_r1", "jaccard_fixed") == pytest.approx(((0.5 + 1) / 2 + 1) / 2)
    assert agg(rows, "bsc_adaptive_r1", "capped") == 0.0
    assert agg(rows, "bsc_adaptive_r1", "t_star") == 0.5
    assert agg(rows, "bsc_adaptive_r1", "shuffles_fixed") == 4.0
    # r = 2: q1 e0 4 (cap, unsettled: the 4th addition changed it), e1 3; q2 e0 3, e1 4 (settled) -> 3.5
    assert agg(rows, "bsc_adaptive_r2", "shuffles_mean") == pytest.approx(3.5)
    assert agg(rows, "bsc_adaptive_r2", "capped") == pytest.approx((0.5 + 0.0) / 2)
    assert agg(rows, "bsc_adaptive_r2", "agreement") == 1.0
    # r = 3: q1 e0 cap, e1 4 (settled); q2 e0 4 (settled), e1 cap
    assert agg(rows, "bsc_adaptive_r3", "shuffles_mean") == 4.0
    assert agg(rows, "bsc_adaptive_r3", "capped") == pytest.approx(0.5)
    assert agg(rows, "bsc_adaptive_r3", "passes_saved") == 0.0


def test_adaptive_rows_responses_and_uncovered_tasks():
    # responses: K = 3, E = 1, all queries. p1 picks r2, r1, r1 (r = 1: stops at 3, agrees with r1);
    # p2 picks s1 throughout (stops at 2).
    resp = table({"p1": (["r1", "r2"], [[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]),
                  "p2": (["s1", "s2"], [[1.0, 0.0]] * 3)})
    rows = list(ad.adaptive_rows(resp, task="response", bsc_k=3, ensembles=1, rs=(1,)))
    # p1 running means: (0, 1), (0.5, 0.5) -> tie -> r1, (0.667, 0.333) -> r1
    assert agg(rows, "bsc_adaptive_r1", "shuffles_mean") == pytest.approx(2.5)
    assert agg(rows, "bsc_adaptive_r1", "agreement") == 1.0
    assert not [m for _, _, m, _ in rows if m in ("jaccard_fixed", "t_star")]
    assert list(ad.adaptive_rows(resp, task="qa", bsc_k=3, ensembles=1)) == []
    assert list(ad.adaptive_rows(resp, task="rerank", bsc_k=3, ensembles=1, thresholds=None)) == []
    with pytest.raises(ValueError, match="presentations 0..3"):
        list(ad.adaptive_rows(resp, task="response", bsc_k=2, ensembles=2))


def test_default_geometry_k2_cannot_save_a_pass():
    """The embedded default runs BSC x2: the earliest stop is r + 1 >= 2 = K, so adaptive is fixed K."""
    rng = np.random.default_rng(11)
    t = table({f"q{i}": ([f"d{j}" for j in range(5)], rng.random((8, 5)).tolist()) for i in range(6)})
    thr = {"t_star": 0.5, "dev_queries": ["q0"], "test_queries": [f"q{i}" for i in range(1, 6)]}
    rows = list(ad.adaptive_rows(t, task="rerank", bsc_k=2, ensembles=4, rs=(1, 2, 3), thresholds=thr))
    for r in (1, 2, 3):
        assert agg(rows, f"bsc_adaptive_r{r}", "shuffles_mean") == 2.0
        assert agg(rows, f"bsc_adaptive_r{r}", "agreement") == 1.0


def test_fixed_k_decision_is_the_bsc_views_retained_set():
    """Brute force: with r >= K every ensemble runs to the cap; its decision must be the retained set of
    the K-shuffle BSC ensemble of presdep.contracts.views (the scores every BSC metric reads)."""
    rng = np.random.default_rng(5)
    K, E = 5, 3
    docs = {f"q{i}": [f"d{j}" for j in range(6)] for i in range(4)}
    t = table({q: (d, rng.random((K * E, len(d))).tolist()) for q, d in docs.items()})
    view = decision_presentations(t, bsc_k=K, ensembles=E)
    for q, d in docs.items():
        s = t.filter((pl.col("query_id") == q) & (pl.col("perturbation") == "random_shuffle")).sort(
            "presentation", "doc_id")["score"].to_numpy().reshape(K * E, -1)
        for e in range(E):
            want = set(view.filter((pl.col("query_id") == q) & (pl.col("presentation") == e)
                                   & (pl.col("score") >= 0.5))["doc_id"].to_list())
            path = ad.retained_path(s[e * K:(e + 1) * K], 0.5)
            assert {d[i] for i in np.flatnonzero(path[-1])} == want
            # and the adaptive decision at its stop is the retained set of the first k shuffles' mean
            k, _ = ad.stopping_point(path, 1)
            brute = {d[i] for i, v in enumerate(s[e * K:e * K + k].mean(axis=0)) if v >= 0.5}
            assert {d[i] for i in np.flatnonzero(path[k - 1])} == brute


# --- emission beside the K-curve ----------------------------------------------------------------

def test_rows_are_emitted_beside_the_k_curve():
    t = hand_table()
    rows = list(curve_rows(t, QRELS, task="rerank", bsc_k=4, ensembles=2, ks=(1, 2), thresholds=THR))
    perts = {p for p, _, _, _ in rows}
    assert perts == {"bsc_curve_k1", "bsc_curve_k2", "bsc_adaptive_r1", "bsc_adaptive_r2", "bsc_adaptive_r3",
                     "bsc_adaptive_r5"}
    assert agg(rows, "bsc_adaptive_r1", "shuffles_mean") == pytest.approx(2.5)
    none = list(curve_rows(t, QRELS, task="rerank", bsc_k=4, ensembles=2, ks=(1,), thresholds=THR, adaptive_r=()))
    assert {p for p, _, _, _ in none} == {"bsc_curve_k1"}
    out = cm.compute_metrics(t, QRELS, dataset="t", task="rerank", variant="bsc", seed=None, thresholds=THR,
                             bsc_k=4, ensembles=2, bsc_curve=(1,))
    got = out.filter(pl.col("perturbation") == "bsc_adaptive_r1")
    assert got["query_id"].null_count() == got.height
    assert dict(zip(got["metric"], got["value"]))["agreement"] == pytest.approx(0.75)


def test_a_shuffle_missing_a_document_is_refused():
    t = hand_table().filter(~((pl.col("query_id") == "q1") & (pl.col("presentation") == 5)
                              & (pl.col("doc_id") == "b") & (pl.col("perturbation") == "random_shuffle")))
    with pytest.raises(ValueError, match="presentations 0..7 of every document of query 'q1'"):
        list(ad.adaptive_rows(t, task="rerank", bsc_k=4, ensembles=2, thresholds=THR))
