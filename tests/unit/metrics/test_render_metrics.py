"""Render metrics against pytrec_eval run directly: each variant's nDCG@10, Zeng PSI with the
variants as buckets (per query and corpus), the spread; tau-PSI 0 where no variant moves."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import pytrec_eval

from presdep.contracts.errors import InvalidInput
from presdep.metrics.render import render_metrics
from presdep.report.render_table import render_table, to_markdown

DOCS = ["d0", "d1", "d2", "d3"]
QRELS = {"q1": {"d0": 0, "d1": 2, "d2": 1, "d3": 0}, "q2": {"d0": 1, "d1": 0, "d2": 0, "d3": 3}}
# Per query, per variant, the scores of d0..d3 (distinct: pytrec_eval's own tie rule never applies).
VARIANTS = {
    "q1": [[3.0, 2.0, 1.0, 0.5], [0.5, 2.5, 1.0, 0.2], [1.0, 0.9, 2.0, 0.1], [3.0, 2.0, 1.0, 0.5], [0.1, 0.2, 0.3, 0.4]],
    "q2": [[2.0, 1.0, 0.5, 3.0], [2.0, 1.0, 0.5, 0.1], [0.2, 1.0, 0.5, 0.3], [0.4, 0.3, 0.2, 0.1], [2.0, 1.5, 1.2, 3.0]],
}


def _scores(kind="separator", variants=VARIANTS):
    rows = []
    for q, per_v in variants.items():
        rows += [(q, d, "first_stage", 0, i, 0, i, per_v[0][i]) for i, d in enumerate(DOCS)]
        for v, values in enumerate(per_v):
            rows += [(q, d, kind, v, i, 0, i, values[i]) for i, d in enumerate(DOCS)]
    return pl.DataFrame(rows, orient="row", schema={"query_id": pl.String, "doc_id": pl.String, "perturbation": pl.String,
                                                    "presentation": pl.Int32, "position": pl.Int32, "prompt": pl.Int32,
                                                    "slot": pl.Int32, "score": pl.Float64})


def _qrels():
    return pl.DataFrame([(q, d, g) for q, j in QRELS.items() for d, g in j.items()], orient="row",
                        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})


def _trec_ndcg(values) -> np.ndarray:
    out = []
    for per_q in zip(*[VARIANTS[q] for q in QRELS]):  # one variant, every query
        run = {q: {d: float(s) for d, s in zip(DOCS, per_q[i])} for i, q in enumerate(QRELS)}
        res = pytrec_eval.RelevanceEvaluator(QRELS, {"ndcg_cut.10"}).evaluate(run)
        out.append([res[q]["ndcg_cut_10"] for q in QRELS])
    return np.array(out).T  # (queries, variants)


def test_variant_metrics_match_pytrec_eval():
    thresholds = {"t_star": 1.0, "test_queries": ["q1", "q2"]}
    m = render_metrics(_scores(), _qrels(), dataset="toy", variant="v", thresholds=thresholds)
    nd = _trec_ndcg(VARIANTS)

    def get(metric, qid=None):
        sel = m.filter((pl.col("perturbation") == "separator") & (pl.col("metric") == metric)
                       & (pl.col("query_id").is_null() if qid is None else pl.col("query_id") == qid))
        assert sel.height == 1, (metric, qid)
        return sel["value"][0]

    for i, q in enumerate(QRELS):
        assert get("zeng_psi", q) == pytest.approx(1 - nd[i].min() / nd[i].max(), abs=1e-12)
        assert get("ndcg10_variant_spread", q) == pytest.approx(nd[i].max() - nd[i].min(), abs=1e-12)
        assert get("ndcg10_shuffle_worst", q) == pytest.approx(nd[i].min(), abs=1e-12)
    means = nd.mean(axis=0)
    assert get("zeng_psi_corpus") == pytest.approx(1 - means.min() / means.max(), abs=1e-12)
    for v in range(5):
        assert get(f"ndcg10_variant{v}") == pytest.approx(means[v], abs=1e-12)
    assert get("tau_psi") > 0.0
    # The canonical prompt's quality cells; nothing of order's.
    assert set(m["perturbation"]) == {"first_stage", "separator"}
    assert m.filter(pl.col("perturbation") == "first_stage")["metric"].to_list()[0] == "ndcg@10"

    table = render_table({"Row": m})
    assert table.filter((pl.col("metric") == "zeng_psi_corpus"))["value"][0] == pytest.approx(1 - means.min() / means.max())
    md = to_markdown(table)
    assert "| Row | toy | separator | " in md and "Variants: id_relabel: 0 numeric" in md


def test_variants_that_agree_give_no_movement_and_a_stray_kind_is_refused():
    same = {q: [per_v[0]] * 5 for q, per_v in VARIANTS.items()}
    m = render_metrics(_scores("scale", same), _qrels(), dataset="toy", variant="v",
                       thresholds={"t_star": 1.0, "test_queries": ["q1", "q2"]})
    agg = dict(m.filter(pl.col("query_id").is_null() & (pl.col("perturbation") == "scale"))
               .select("metric", "value").iter_rows())
    assert agg["tau_psi"] == 0.0 and agg["zeng_psi_corpus"] == 0.0 and agg["set_flip"] == 0.0
    with pytest.raises(InvalidInput, match="expected render kinds"):
        render_metrics(_scores("random_shuffle"), _qrels(), dataset="toy", variant="v",
                       thresholds={"t_star": 1.0, "test_queries": ["q1"]})
