"""Like-for-like quality in the contrasts and discordance (presdep.report.contrasts, discordance,
slot_following): a row whose scores follow the slot has its first-stage-order nDCG flagged as a
copy of the first stage, with the shuffle-mean comparison beside it; the amortization terms print
the K they used; an empty table says why; shared permutations make query intervals conditional."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.contracts.presentations import shuffle_order
from presdep.report.contrast_bootstrap import Side, paired_difference
from presdep.report.contrasts import SHUFFLE_MEAN, Settings, contrast_table, to_markdown, write_contrasts
from presdep.report.discordance import discordance, sentence
from presdep.report.discordance import to_markdown as discordance_markdown

SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}
_ROW = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
        "bsc_ensembles": 4, "tasks": ["rerank"]}
VARIANTS = {name: Variant.checked({**_ROW, "label": label}, name)
            for name, label in (("off_the_shelf", "Off the shelf"), ("bsc", "BSC (x2)"), ("plain", "Plain"))}
QUERIES = [f"q{i}" for i in range(30)]
RNG = np.random.default_rng(4)
# Per variant: first-stage-order nDCG@10 and shuffle-mean nDCG@10 per query, and its slot test's p.
FIRST = {v: RNG.uniform(0.3, 0.9, len(QUERIES)) for v in VARIANTS}
SHUFFLED = {v: RNG.uniform(0.2, 0.8, len(QUERIES)) for v in VARIANTS}
SLOT_P = {"off_the_shelf": 1e-4, "bsc": 0.6, "plain": 0.4}


def _metrics(order_averaged_k: float | None = None) -> pl.DataFrame:
    rows = []
    for v in VARIANTS:
        for q, first, shuffled in zip(QUERIES, FIRST[v], SHUFFLED[v]):
            rows.append(("d", "rerank", v, None, "first_stage", q, "ndcg@10", float(first)))
            rows.append(("d", "rerank", v, None, "random_shuffle", q, "ndcg10_shuffle_mean", float(shuffled)))
        rows.append(("d", "rerank", v, None, "first_stage", None, "ndcg@10", float(FIRST[v].mean())))
        rows.append(("d", "rerank", v, None, "random_shuffle", None, "ndcg10_shuffle_mean", float(SHUFFLED[v].mean())))
        rows.append(("d", "rerank", v, None, "random_shuffle", None, "slot_p_value", SLOT_P[v]))
        rows.append(("d", "rerank", v, None, "random_shuffle", None, "var_share_slot", 0.3))
        if order_averaged_k is not None:
            rows.append(("d", "rerank", v, None, "random_shuffle", None, "order_averaged_k", order_averaged_k))
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def test_a_slot_following_row_is_flagged_and_its_shuffle_mean_contrast_sits_beside_it():
    settings = Settings(resamples=4000, seed=3)
    table = contrast_table(_metrics(), VARIANTS, [("BSC (x2)", "Off the shelf"), ("BSC (x2)", "Plain")], None,
                           settings)
    quality = table.filter(pl.col("column") == "rerank_ndcg10")
    by = {(r["a"], r["b"], r["kind"]): r for r in quality.iter_rows(named=True)}
    copied, beside = by[("BSC (x2)", "Off the shelf", "contrast")], by[("BSC (x2)", "Off the shelf", SHUFFLE_MEAN)]
    # Table 1's cell is unchanged: the first-stage-order difference; beside it the shuffle means'.
    assert copied["difference"] == pytest.approx(float((FIRST["bsc"] - FIRST["off_the_shelf"]).mean()))
    diff = SHUFFLED["bsc"] - SHUFFLED["off_the_shelf"]
    assert beside["difference"] == pytest.approx(float(diff.mean()))
    assert beside["se"] == pytest.approx(diff.std(ddof=1) / np.sqrt(len(diff)), rel=0.08)  # the paired SE
    assert copied["slot_copied"] and beside["slot_copied"]  # the base's slot test: p = 1e-4 < 0.01
    plain = by[("BSC (x2)", "Plain", "contrast")]
    assert not plain["slot_copied"] and not by[("BSC (x2)", "Plain", SHUFFLE_MEAN)]["slot_copied"]
    md = to_markdown(table, settings)
    assert "| BSC (x2) - Off the shelf | nDCG@10 (first-stage order; copies the first stage) |" in md
    assert "| BSC (x2) - Off the shelf | nDCG@10 (shuffle mean; read this) |" in md
    assert "| BSC (x2) - Plain | nDCG@10 (first-stage order) |" in md
    assert "Copies the first stage: in BSC (x2) - Off the shelf, a row's scores follow the slot" in md
    # a tau-PSI column has no shuffle-mean twin
    assert table.filter((pl.col("kind") == SHUFFLE_MEAN) & (pl.col("column") != "rerank_ndcg10")).height == 0


def test_the_amortization_terms_print_the_k_they_used():
    table = contrast_table(_metrics(order_averaged_k=4.0), VARIANTS, [], "off_the_shelf", Settings(resamples=200))
    # no order-averaged quality rows here, so R is absent, but the ceiling term needs them too
    assert table.filter(pl.col("kind") == "amortization R").height == 0
    rows = _metrics(order_averaged_k=4.0)
    averaged = rows.filter(pl.col("metric") == "ndcg10_shuffle_mean").with_columns(
        pl.lit("ndcg10_order_averaged").alias("metric"), pl.col("value") + 0.05)
    table = contrast_table(pl.concat([rows, averaged]), VARIANTS, [], "off_the_shelf", Settings(resamples=200))
    r = table.filter(pl.col("kind") == "amortization R").row(0, named=True)
    assert r["k_used"] == "4" and r["difference"] == pytest.approx(0.05)
    md = to_markdown(table, Settings(resamples=200), empty_reason="contrasts.pairs names no pair")
    assert "| R (K = 4) | Off the shelf | nDCG@10 |" in md and "| I (K = 4) | Off the shelf |" in md
    assert "K = 10 quality" not in md
    assert md.startswith("No contrasts: contrasts.pairs names no pair.")


def test_an_empty_paper_contrast_table_says_why_and_shared_permutations_are_named(tmp_path):
    path = tmp_path / "m.parquet"
    _metrics().with_columns(pl.col("seed").cast(pl.Int64)).write_parquet(path)
    write_contrasts([path], VARIANTS, tmp_path / "c.csv", tmp_path / "c.md", pairs="paper", base="off_the_shelf",
                    settings=Settings(resamples=100), shared_permutations=["d"])
    md = (tmp_path / "c.md").read_text()
    assert md.startswith("No contrasts: pairs: paper compares trained rows") and "runs no trained row" in md
    assert "Shared permutations (d): every query is read under the same M slot permutations" in md
    assert "conditional on the M permutations drawn" in md


def _ndcg10(grades: np.ndarray) -> float:
    """nDCG@10 (exponential gain is linear for 0/1 grades) of a ranking given its grades in rank order."""
    discount = 1.0 / np.log2(np.arange(2, 12))
    ideal = np.sort(grades)[::-1][:10]
    return float((grades[:10] * discount[:len(grades[:10])]).sum() / (ideal * discount[:len(ideal)]).sum())


def test_a_slot_driven_difference_under_shared_permutations_vanishes_under_per_query_ones():
    """Two content-blind scorers, one ranking the presented order and one its reverse, have the same
    expected quality; the paper's rule reads every query under the same 4 permutations, whose draw
    makes the first look better (the query interval excludes 0), and per-query permutations don't."""
    n, m_shuffles, rng = 20, 4, np.random.default_rng(11)
    grades = [(rng.uniform(size=n) < 0.7 * np.exp(-np.arange(n) / 4)).astype(float) for _ in range(400)]
    for g in grades:
        g[0] = max(g[0], 1.0)  # every query has a relevant document
    found = {}
    for rule in ("paper", "per_query"):
        front, back = [], []
        for q, g in enumerate(grades):
            orders = [shuffle_order(n, m, rule, base_seed=0, dataset="d", query_id=f"q{q}")
                      for m in range(m_shuffles)]
            front.append(np.mean([_ndcg10(g[o]) for o in orders]))
            back.append(np.mean([_ndcg10(g[o][::-1]) for o in orders]))
        found[rule] = paired_difference(Side([np.array([front])], (None,)), Side([np.array([back])], (None,)),
                                        resamples=4000, seed=0, margin=0.005)
    assert found["paper"].excludes_zero and found["paper"].low > 0.01
    assert not found["per_query"].excludes_zero
    assert abs(found["per_query"].estimate) < found["paper"].estimate / 3


def test_discordance_reads_like_for_like_and_leaves_degenerate_jaccard_out():
    rows = []
    cells = {("d1", "off_the_shelf"): (0.70, 0.40, 0.50), ("d1", "bsc"): (0.65, 0.80, 0.60),
             ("d1", "plain"): (0.60, 0.90, 0.55),  # plain's Jaccard there is degenerate
             ("d2", "off_the_shelf"): (0.50, 0.95, 0.40), ("d2", "bsc"): (0.45, 0.90, 0.45),
             ("d2", "plain"): (0.40, 0.99, 0.30)}
    for (d, v), (first, jaccard, shuffled) in cells.items():
        rows += [(d, "rerank", v, None, "first_stage", None, "ndcg@10", first),
                 (d, "rerank", v, None, "random_shuffle", None, "jaccard", jaccard),
                 (d, "rerank", v, None, "random_shuffle", None, "ndcg10_shuffle_mean", shuffled)]
    for d in ("d1", "d2"):
        rows.append((d, "rerank", "plain", None, "random_shuffle", None, "warn_threshold_keeps_all", 1.0))
    rows += [("d1", "rerank", "off_the_shelf", None, "random_shuffle", None, "slot_p_value", 1e-5),
             ("d1", "rerank", "bsc", None, "random_shuffle", None, "slot_p_value", 0.5)]
    table, summary = discordance(pl.DataFrame(rows, schema=SCHEMA, orient="row"), VARIANTS)
    d1 = table.row(0, named=True)
    # d1: plain's degenerate 0.90 does not compete; BSC is the most stable; the best shuffle mean is BSC
    assert (d1["best_ndcg10"], d1["best_jaccard"], d1["differ"]) == ("Off the shelf", "BSC (x2)", True)
    assert (d1["best_shuffle_mean"], d1["shuffle_mean"], d1["differ_shuffle_mean"]) == ("BSC (x2)", 0.60, False)
    assert d1["slot_copied"] == "Off the shelf" and d1["degenerate"] == "Plain"
    assert summary["collections"] == 2 and summary["differ"] == 1 and summary["differ_shuffle_mean"] == 1
    md = discordance_markdown(table, summary)
    assert "| d1 | Off the shelf (copies the first stage) | 0.7000 | BSC (x2) |" in md
    assert "read the shuffle-mean columns for these rows: d1: Off the shelf; d2: Off the shelf" in md
    assert "the best row is not the most stable on 1 of 2" in sentence(summary)
    # every row degenerate: the collection is left out of the count, and the sentence says so
    all_bad = pl.DataFrame(rows + [("d2", "rerank", v, None, "random_shuffle", None, "warn_threshold_keeps_all", 1.0)
                                   for v in ("off_the_shelf", "bsc")], schema=SCHEMA, orient="row")
    table, summary = discordance(all_bad, VARIANTS)
    assert table.row(1, named=True)["differ"] is None and summary["collections"] == 1
    assert "1 collection is left out: every chosen row's Jaccard there is degenerate" in sentence(summary)


def test_every_empty_decision_table_says_why():
    """A table with no row is a sentence naming what it needs, not a header over nothing."""
    from presdep.report import context_table, matched_retention, pool_table, render_table, verdict_table
    empty = pl.DataFrame(schema={"label": pl.String, "dataset": pl.String, "perturbation": pl.String,
                                 "metric": pl.String, "value": pl.Float64})
    said = {
        "matched": matched_retention.to_markdown(empty),
        "pool": pool_table.to_markdown(empty, empty),
        "render": render_table.to_markdown(empty),
        "context": context_table.to_markdown(empty),
        "verdict": verdict_table.to_markdown(empty),
    }
    for name, md in said.items():
        assert "|---" not in md and " row: " in md and "docs/methods/" in md, (name, md)


def test_stability_intervals_say_they_are_conditional_on_shared_permutations(tmp_path):
    from presdep.contracts.schemas import write_table
    from presdep.report.stability_io import write_table1_stability
    metrics = _metrics().filter(pl.col("query_id").is_not_null() & (pl.col("metric") == "ndcg@10"))
    path = write_table(metrics, tmp_path / "m.parquet", "metrics")
    plain = write_table1_stability([path], tmp_path / "a.json", tmp_path / "a", resamples=200, seed=1)
    assert not any("conditional" in w for w in plain["columns"]["rerank_ndcg10"]["warnings"])
    shared = write_table1_stability([path], tmp_path / "b.json", tmp_path / "b", resamples=200, seed=1,
                                    shared_permutations=["d"])
    said = [w for w in shared["columns"]["rerank_ndcg10"]["warnings"] if "conditional" in w]
    assert said and "every query of d shares" in said[0] and "per_query" in said[0]
    assert "conditional on those permutations" in (tmp_path / "b" / "rerank_ndcg10.svg").read_text()
