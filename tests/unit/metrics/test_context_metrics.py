"""Context-decomposition metrics on a hand-made toy: nDCG@10 per arm against pytrec_eval called
directly, the terms closing exactly, the shuffle mean, score differences by hand."""

from __future__ import annotations

import math

import polars as pl
import pytest
import pytrec_eval

from presdep.contracts.errors import InvalidInput
from presdep.metrics.context import context_metrics

QRELS = {"q": {"a": 3, "b": 0, "c": 1}}
# (arm, presentation) -> scores of a, b, c (first-stage ranks 1, 2, 3)
READS = {("A1", -1): (1.0, 2.0, 3.0), ("A2", -1): (3.0, 2.0, 1.0), ("A2", 0): (2.0, 2.0, 1.0),
         ("A3", -1): (1.0, 3.0, 2.0), ("A3", 0): (1.0, 3.0, 2.0), ("A4", -1): (2.0, 3.0, 1.0),
         ("A4", 0): (1.0, 2.0, 3.0)}


def _scores() -> pl.DataFrame:
    rows = [("q", d, arm, pres, i, 0, 3, i + 1, s) for (arm, pres), vals in READS.items()
            for i, (d, s) in enumerate(zip("abc", vals))]
    return pl.DataFrame(rows, orient="row", schema=["query_id", "doc_id", "arm", "presentation", "position", "slot",
                                                     "width", "first_stage_rank", "score"])


def _ndcg(order: str) -> float:
    run = {"q": {d: float(3 - i) for i, d in enumerate(order)}}
    return pytrec_eval.RelevanceEvaluator(QRELS, {"ndcg_cut.10"}).evaluate(run)["q"]["ndcg_cut_10"]


def test_arm_ndcg_terms_and_score_differences_by_hand():
    m = context_metrics(_scores(), QRELS, dataset="toy", variant="v")
    got = {(p, mm): v for p, q, mm, v in m.select("perturbation", "query_id", "metric", "value").iter_rows() if q}
    # rankings (ties by first-stage rank): A1 c,b,a; A2 a,b,c; A2 shuffle 0: a,b,c (a ties b, a ranks first);
    # A3 b,c,a; A4 b,a,c; A4 shuffle 0: c,b,a
    a1, a2, a3, a4 = _ndcg("cba"), _ndcg("abc"), _ndcg("bca"), _ndcg("bac")
    assert got[("context_canonical", "ndcg10_A1")] == pytest.approx(a1)
    assert got[("context_canonical", "ndcg10_A2")] == pytest.approx(a2)
    assert got[("context_canonical", "ndcg10_A3")] == pytest.approx(a3)
    assert got[("context_canonical", "ndcg10_A4")] == pytest.approx(a4)
    assert got[("context_canonical", "width")] == pytest.approx(a2 - a1)
    closes = sum(got[("context_canonical", t)] for t in ("companion_content", "companion_presence", "skeleton"))
    assert closes == pytest.approx(got[("context_canonical", "width")], abs=1e-12)
    # one shuffle: its value is the mean; A1 keeps its single reading
    assert got[("context_shuffled", "ndcg10_A1")] == pytest.approx(a1)
    assert got[("context_shuffled", "ndcg10_A4")] == pytest.approx(_ndcg("cba"))
    assert got[("context_shuffled", "skeleton")] == pytest.approx(0.0)
    # A2 - A1 canonical scores: (3-1, 2-2, 1-3) -> signed 0, absolute 4/3
    assert got[("context_canonical", "score_width")] == pytest.approx(0.0)
    assert got[("context_canonical", "score_width_abs")] == pytest.approx(4 / 3)
    # A3 - A4 in shuffle 0: (1-1, 3-2, 2-3) -> 0 and 2/3
    assert got[("context_shuffled", "score_companion_presence_abs")] == pytest.approx(2 / 3)


def test_donor_rows_and_refusals():
    donors = {"companions": 40, "mean": 1.5, "p95": 4.0, "exact_share": 0.25}
    m = context_metrics(_scores(), QRELS, dataset="toy", variant="v", donors=donors)
    got = {mm: v for p, mm, v in m.filter(pl.col("perturbation") == "context_donors")
           .select("perturbation", "metric", "value").iter_rows()}
    assert got == {"length_error_mean": 1.5, "length_error_p95": 4.0, "length_exact_share": 0.25, "companions": 40.0}
    with pytest.raises(InvalidInput, match="arms"):
        context_metrics(_scores().filter(pl.col("arm") != "A3"), QRELS, dataset="toy", variant="v")
    unjudged = context_metrics(_scores(), {"other": {"a": 1}}, dataset="toy", variant="v")
    assert unjudged.filter(pl.col("metric") == "ndcg10_A1")["value"].to_list() == [None, None]  # both orders
    assert not any(isinstance(v, float) and math.isnan(v) for v in unjudged["value"].to_list())
