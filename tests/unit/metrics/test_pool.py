"""Pool-perturbation metrics: a hand-computed toy, nDCG against pytrec_eval, and scorers that
are (B = 1, text only) and are not (companion-sensitive) invariant to the pool."""

from __future__ import annotations

import hashlib
import math

import polars as pl
import pytest
import pytrec_eval

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import SCHEMAS
from presdep.metrics.pool import metric_names, pool_metrics, shared_pairs
from presdep.scoring import GradeReadout
from presdep.scoring.pool_run import score_pools


def pool_frame(qid: str, pools: dict[str, list[tuple[str, float]]], drop: int) -> pl.DataFrame:
    rows = [(qid, d, name, pos, s, drop) for name, docs in pools.items() for pos, (d, s) in enumerate(docs)]
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "pool", "position", "score", "drop_rank"], orient="row")


# Canonical d0..d5 (d2 at rank 2 is dropped), replace appends d6. Shared: d0 d1 d3 d4 d5.
TOY = pool_frame("t", {
    "canonical": [("d0", 5), ("d1", 4), ("d2", 9), ("d3", 3), ("d4", 2), ("d5", 1)],
    # tie d0 = d1: first-stage rank puts d0 first -> d0 d1 d5 d4 d3
    "replace": [("d0", 5), ("d1", 5), ("d3", 1), ("d4", 2), ("d5", 3), ("d6", 9)],
    "drop": [("d0", 5), ("d1", 3), ("d3", 4), ("d4", 1), ("d5", 2)],  # -> d0 d3 d1 d5 d4
}, drop=2)
TOY_QRELS = {"t": {"d0": 0, "d1": 2, "d2": 3, "d3": 1, "d5": 3, "d6": 1}}


def value(df: pl.DataFrame, perturbation: str, metric: str, qid: str | None = "t") -> float | None:
    sel = df.filter((pl.col("perturbation") == perturbation) & (pl.col("metric") == metric)
                    & (pl.col("query_id").is_null() if qid is None else pl.col("query_id") == qid))
    assert sel.height == 1, sel
    return sel["value"][0]


def test_toy_pool_psi_by_hand():
    m = pool_metrics(TOY, TOY_QRELS, dataset="toy", variant="v", k=2)
    # canonical d0 d1 d3 d4 d5; drop d0 d3 d1 d5 d4: 2 of 10 pairs discordant, tau = 0.6, psi = 0.2
    assert value(m, "pool_drop", "pool_psi") == pytest.approx(0.2)
    # replace d0 d1 d5 d4 d3: the 3 pairs among d3 d4 d5 discordant, tau = 0.4, psi = 0.3
    assert value(m, "pool_replace", "pool_psi") == pytest.approx(0.3)
    assert value(m, "pool_replace_minus_drop", "pool_psi", None) == pytest.approx(0.1)
    assert value(m, "pool_drop", "top2_changed") == 1.0  # {d0, d1} -> {d0, d3}
    assert value(m, "pool_replace", "top2_changed") == 0.0


def direct_ndcg(ranking: list[str], grades: dict[str, int], k: int) -> float:
    run = {"t": {d: float(len(ranking) - i) for i, d in enumerate(ranking)}}
    ev = pytrec_eval.RelevanceEvaluator({"t": grades}, {f"ndcg_cut.{k}"})
    return ev.evaluate(run)["t"][f"ndcg_cut_{k}"]


def test_toy_ndcg_matches_pytrec_eval_on_the_shared_documents_grades():
    m = pool_metrics(TOY, pl.DataFrame({"query_id": ["t"] * 6, "doc_id": list(TOY_QRELS["t"]),
                                        "relevance": list(TOY_QRELS["t"].values())}), dataset="toy", variant="v", k=2)
    shared = {"d0": 0, "d1": 2, "d3": 1, "d4": 0, "d5": 3}  # d2 (dropped) and d6 (appended) left out
    canonical = direct_ndcg(["d0", "d1", "d3", "d4", "d5"], shared, 2)
    drop = direct_ndcg(["d0", "d3", "d1", "d5", "d4"], shared, 2)
    replace = direct_ndcg(["d0", "d1", "d5", "d4", "d3"], shared, 2)
    assert canonical == pytest.approx(2 / math.log2(3) / (3 + 2 / math.log2(3)))  # and by hand
    assert canonical != pytest.approx(direct_ndcg(["d0", "d1", "d3", "d4", "d5"], TOY_QRELS["t"], 2))
    assert value(m, "pool_drop", "ndcg2_canonical") == pytest.approx(canonical)
    assert value(m, "pool_replace", "ndcg2_canonical") == pytest.approx(canonical)
    assert value(m, "pool_drop", "ndcg2_perturbed") == pytest.approx(drop)
    assert value(m, "pool_replace", "ndcg2_perturbed") == pytest.approx(replace)
    assert value(m, "pool_drop", "ndcg2_change") == pytest.approx(drop - canonical)
    assert value(m, "pool_drop", "ndcg2_abs_change") == pytest.approx(abs(drop - canonical))
    assert drop - canonical != 0


def test_rows_follow_the_metrics_contract_with_aggregates():
    m = pool_metrics(TOY, TOY_QRELS, dataset="toy", variant="v", seed=1)
    assert m.columns == SCHEMAS["metrics"].names
    assert set(m["perturbation"]) == {"pool_replace", "pool_drop", "pool_replace_minus_drop"}
    assert set(m.filter(pl.col("perturbation") == "pool_drop")["metric"]) == set(metric_names(10))
    assert m.filter(pl.col("query_id").is_null()).height == 2 * 6 + 1
    assert set(m["seed"]) == {1}


def test_a_query_without_qrels_has_null_ndcg_but_a_pool_psi():
    m = pool_metrics(TOY, {"other": {"x": 1}}, dataset="toy", variant="v", k=2)
    assert value(m, "pool_drop", "ndcg2_canonical") is None
    assert value(m, "pool_drop", "pool_psi") == pytest.approx(0.2)


def test_pool_scores_with_two_removed_documents_are_refused():
    bad = TOY.filter(~((pl.col("pool") == "drop") & (pl.col("doc_id") == "d5")))
    with pytest.raises(InvalidInput, match="removes exactly one"):
        shared_pairs(bad, "drop")


def text_value(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8 * 3


class TextScorer:
    """Order- and companion-invariant: a document's score depends on its text alone."""

    name = "text"

    def score_prompts(self, prompts):
        return [[GradeReadout(text_value(d)) for d in docs] for _, docs in prompts]


class CompanionScorer:
    """A document's score moves with the mean of its prompt's other documents."""

    name = "companions"

    def score_prompts(self, prompts):
        out = []
        for _, docs in prompts:
            base = [text_value(d) for d in docs]
            total = sum(base)
            out.append([GradeReadout(b + (total - b) / max(1, len(docs) - 1)) for b in base])
        return out


def candidates(n_queries: int = 4, n_docs: int = 103) -> pl.DataFrame:
    rows = [(f"q{q}", f"query {q}", f"q{q}d{r}", f"doc {r} of query {q}", r)
            for q in range(n_queries) for r in range(1, n_docs + 1)]
    return pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank"], orient="row")


def qrels_of(n_queries: int = 4) -> dict[str, dict[str, int]]:
    return {f"q{q}": {f"q{q}d{r}": (r * 7 + q) % 4 for r in range(1, 60, 3)} for q in range(n_queries)}


def test_b1_text_scorer_is_zero_by_construction():
    scores = score_pools(candidates(), TextScorer(), b=1, chunking="contiguous", seed=0, query_sample_seed=0,
                         queries=4).scores
    m = pool_metrics(scores, qrels_of(), dataset="toy", variant="v")
    per_query = m.filter(pl.col("query_id").is_not_null())
    for metric in ("pool_psi", "top10_changed", "ndcg10_change", "ndcg10_abs_change"):
        vals = per_query.filter(pl.col("metric") == metric)["value"].to_list()
        assert len(vals) == 8 and all(v == 0.0 for v in vals), (metric, vals)
    assert per_query.filter(pl.col("metric") == "ndcg10_canonical")["value"].max() > 0  # a real, non-trivial ranking


def test_companion_sensitive_scorer_moves_the_ranking():
    scores = score_pools(candidates(), CompanionScorer(), b=20, chunking="contiguous", seed=0, query_sample_seed=0,
                         queries=4).scores
    m = pool_metrics(scores, qrels_of(), dataset="toy", variant="v")
    for pert in ("pool_replace", "pool_drop"):
        assert value(m, pert, "pool_psi", None) > 0
