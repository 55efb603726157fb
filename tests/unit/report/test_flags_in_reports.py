"""Degenerate decisions and ties wherever the number appears: the counts file, table1.md's
notes and cells, the table1 job's WARNING lines, and the stability report (JSON, printed
table, SVG). Each case is constructed so that its answer can be written down by hand."""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.contracts.errors import StabilityError
from presdep.contracts.schemas import write_table
from presdep.metrics.compute import compute_metrics
from presdep.report.stability_analysis import analyse_column, analyse_table1
from presdep.report.stability_cli import register
from presdep.report.stability_io import write_table1_stability
from presdep.report.stability_svg import render_stability_svg
from presdep.report.table1_notes import DEGENERATE_FIXES, NOTE_LIMIT
from presdep.report.tables import build_table1, to_markdown, write_table1

SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}
FLAGS = ("warn_threshold_keeps_all", "warn_threshold_keeps_none", "warn_threshold_grid_edge",
         "warn_retention_high", "warn_retention_low", "warn_few_test_queries")
ORDER_INVARIANT_WARNING = ("declares order_invariant; its tau-PSI > 0 comes from tied scores broken by "
                           "presented position")


def rows_of(variant, metric, per_query, *, dataset="dl19", seed=None, task="rerank", pert="random_shuffle"):
    """Per-query rows and their aggregate (the mean), as the metrics job writes them."""
    out = [{"dataset": dataset, "task": task, "variant": variant, "seed": seed, "perturbation": pert,
            "query_id": q, "metric": metric, "value": v} for q, v in per_query.items()]
    vals = [v for v in per_query.values() if v is not None]
    out.append({"dataset": dataset, "task": task, "variant": variant, "seed": seed, "perturbation": pert,
                "query_id": None, "metric": metric, "value": sum(vals) / len(vals) if vals else None})
    return out


def flag(variant, metric, value=1.0, *, dataset="dl19", seed=None):
    return [{"dataset": dataset, "task": "rerank", "variant": variant, "seed": seed, "perturbation": "random_shuffle",
             "query_id": None, "metric": metric, "value": value}]


def variants(**specs) -> dict[str, Variant]:
    base = {"scorer": "transformers", "chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4}
    return {name: Variant.checked({**base, **spec}, name) for name, spec in specs.items()}


# --------------------------------------------------------------------- counts and notes


def test_every_raised_flag_is_named_in_the_counts_file_the_note_and_the_log(caplog):
    rows = rows_of("v", "jaccard", {"q1": 1.0, "q2": 1.0})
    rows += rows_of("v", "jaccard", {"r1": 0.5}, dataset="covid")
    rows += rows_of("v", "tau_psi", {"q1": 0.2})
    for m in FLAGS:  # every flag raised on dl19; on covid only few test queries (a 0 is not raised)
        rows += flag("v", m)
    rows += flag("v", "warn_few_test_queries", dataset="covid")
    rows += flag("v", "warn_retention_low", 0.0, dataset="covid")
    rows += flag("v", "warn_queries_without_relevant", 2.0)
    with caplog.at_level(logging.WARNING, logger="presdep.report.tables"):
        table, counts = build_table1(pl.DataFrame(rows, schema=SCHEMA), variants(v={"label": "V", "note": "base"}))
    cell = counts.filter(pl.col("column") == "rerank_jaccard").row(0, named=True)
    assert cell["warnings"] == (
        "dl19: t* keeps every candidate; dl19: t* keeps no candidate; dl19: t* at the edge of its grid; "
        "dl19: mean retention above 0.90; dl19: mean retention below 0.10; covid: fewer than 10 test queries; "
        "dl19: fewer than 10 test queries; dl19: queries without a relevant document in the pool (2)")
    assert counts.filter(pl.col("column") == "rerank_tau_psi")["warnings"][0] == ""
    note = table.row(0, named=True)["note"]
    # in full words 466 characters: said again in short words, each rule with its datasets
    assert note == ("order-dependent (tau-PSI 0.20). base. Jacc. not informative: t* keeps all, t* keeps none, "
                    "t* at grid edge, retention > 0.90, retention < 0.10 (dl19), 3 test queries (covid, dl19); "
                    "fix: retrieve deeper, more queries, fewer candidates, at least 20 queries. "
                    "Flags: degenerate (Jacc.)")
    assert len(note) <= NOTE_LIMIT
    assert note in to_markdown(table)
    warned = [r for r in caplog.records
              if r.levelno == logging.WARNING and "rerank_jaccard is degenerate" in r.getMessage()]
    assert len(warned) == 1 and "dl19: t* at the edge of its grid" in warned[0].getMessage()


def test_a_cell_without_a_degenerate_flag_has_no_note_and_no_degenerate_warning(caplog):
    rows = rows_of("v", "jaccard", {"q1": 0.7})
    rows += [r for m in FLAGS for r in flag("v", m, 0.0)]
    rows += flag("v", "warn_queries_without_relevant", 1.0)  # a counted warning: not degenerate
    with caplog.at_level(logging.WARNING, logger="presdep.report.tables"):
        table, counts = build_table1(pl.DataFrame(rows, schema=SCHEMA), variants(v={"label": "V"}))
    assert table.row(0, named=True)["note"] == ""
    assert counts.filter(pl.col("column") == "rerank_jaccard")["warnings"][0] == (
        "dl19: queries without a relevant document in the pool (1)")
    assert not any("degenerate" in r.getMessage() for r in caplog.records)


def test_seeds_are_named_in_the_counts_file_and_merged_in_the_note():
    rows = []
    for s in (1, 2):
        rows += rows_of("oc", "jaccard", {"q1": 1.0}, seed=s)
        rows += flag("oc", "warn_threshold_grid_edge", seed=s)
    table, counts = build_table1(pl.DataFrame(rows, schema=SCHEMA), variants(oc={"label": "OC"}))
    assert counts.filter(pl.col("column") == "rerank_jaccard")["warnings"][0] == (
        "dl19[seed 1]: t* at the edge of its grid; dl19[seed 2]: t* at the edge of its grid")
    assert table.row(0, named=True)["note"] == ("Jacc. not informative: t* at the edge of its grid (dl19); to fix: "
                                                f"{DEGENERATE_FIXES['warn_threshold_grid_edge']}. Flags: degenerate (Jacc.)")


def test_the_table1_job_logs_the_degenerate_cell_at_warning_and_writes_the_note(tmp_path, caplog):
    rows = rows_of("v", "jaccard", {"q1": 1.0}) + flag("v", "warn_threshold_keeps_all")
    path = write_table(pl.DataFrame(rows, schema=SCHEMA), tmp_path / "m.parquet", "metrics")
    with caplog.at_level(logging.WARNING):
        write_table1([path], variants(v={"label": "V"}), tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "c.csv")
    md = (tmp_path / "t.md").read_text()
    assert (f"| V | 1.0000 | Jacc. not informative: t* keeps every candidate (dl19); to fix: "
            f"{DEGENERATE_FIXES['warn_threshold_keeps_all']}. Flags: degenerate (Jacc.) |") in md
    assert any(r.levelno == logging.WARNING and r.getMessage() == (
        "v rerank_jaccard is degenerate: dl19: t* keeps every candidate") for r in caplog.records)


# ----------------------------------------------------------------------------- ties


def test_tie_rate_column_of_the_counts_file_is_the_mean_over_datasets():
    rows = rows_of("v", "tau_psi", {"q1": 0.1}) + rows_of("v", "tau_psi", {"r1": 0.3}, dataset="covid")
    rows += rows_of("v", "tau_psi_b", {"q1": 0.0}) + rows_of("v", "tau_psi_b", {"r1": 0.2}, dataset="covid")
    rows += rows_of("v", "tie_rate", {"q1": 0.5, "q2": 0.25}) + rows_of("v", "tie_rate", {"r1": 0.0}, dataset="covid")
    rows += rows_of("v", "ndcg@10", {"q1": 0.4}, pert="first_stage")
    _, counts = build_table1(pl.DataFrame(rows, schema=SCHEMA), variants(v={"label": "V"}))
    c = {r["column"]: r for r in counts.iter_rows(named=True)}
    assert "tie_rate" in counts.columns
    assert c["rerank_tau_psi"]["tie_rate"] == pytest.approx((0.375 + 0.0) / 2)  # dl19: (0.5 + 0.25) / 2
    assert c["rerank_tau_psi_b"]["tie_rate"] == pytest.approx(0.1875)
    assert c["rerank_ndcg10"]["tie_rate"] is None


def test_a_run_with_ties_shows_tau_b_beside_tau_a_and_says_why(tmp_path):
    rows = rows_of("tied", "tau_psi", {"q1": 0.044}) + rows_of("tied", "tau_psi_b", {"q1": 0.0})
    rows += rows_of("tied", "tie_rate", {"q1": 0.25})
    rows += rows_of("clean", "tau_psi", {"q1": 0.2}) + rows_of("clean", "tau_psi_b", {"q1": 0.2})
    rows += rows_of("clean", "tie_rate", {"q1": 0.0})
    path = write_table(pl.DataFrame(rows, schema=SCHEMA), tmp_path / "m.parquet", "metrics")
    write_table1([path], variants(tied={"label": "Tied"}, clean={"label": "Clean"}),
                 tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "c.csv")
    md = (tmp_path / "t.md").read_text()
    tied = next(line for line in md.splitlines() if line.startswith("| Tied |"))
    clean = next(line for line in md.splitlines() if line.startswith("| Clean |"))
    assert "| 0.0440 (tau-b 0.0000) |" in tied
    # tau-b 0: the scores themselves do not move; the legend defines the ties flag once
    assert tied.endswith("| order-invariant scores: tau-PSI 0.04 comes only from tied scores broken by presented "
                         "position (tau-PSI-b 0.00). Flags: ties (rerank) |")
    assert md.count("- **ties**:") == 1
    assert "| 0.2000 |" in clean and "tau-b" not in clean
    csv = pl.read_csv(tmp_path / "t.csv")
    assert csv.filter(pl.col("variant") == "tied")["rerank_tau_psi"][0] == pytest.approx(0.044)  # CSV: numbers


def test_order_invariant_scorer_with_tie_broken_tau_psi_is_named_in_a_warning(caplog):
    """End to end: an order-invariant scorer gives a document the same score in every
    presentation; a and b tie (1, 1), c scores 2. Shown as (a, b, c) and (b, a, c), the strict
    rankings are (c, a, b) and (c, b, a): one of three pairs swapped, tau-a = 1/3 and tau-PSI =
    (1 - 1/3) / 2 = 1/3, while tau-b on the raw scores is 1 (tau-PSI-b 0) and the tie rate 1/3."""
    rows = []
    orders = {0: ["a", "b", "c"], 1: ["b", "a", "c"]}
    for pert, ms in (("first_stage", [0]), ("random_shuffle", [0, 1])):
        for m in ms:
            for pos, d in enumerate(orders[m]):
                rows.append({"query_id": "q1", "doc_id": d, "perturbation": pert, "presentation": m,
                             "position": pos, "prompt": 0, "slot": pos, "score": {"a": 1.0, "b": 1.0, "c": 2.0}[d]})
    scores = pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["c"], "relevance": [1]},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    metrics = compute_metrics(scores, qrels, dataset="toy", task="response", variant="inv", seed=None)
    agg = metrics.filter(pl.col("query_id").is_null() & (pl.col("perturbation") == "random_shuffle"))
    value = dict(zip(agg["metric"], agg["value"]))
    assert value["tau_psi"] == pytest.approx(1 / 3) and value["tau_psi_b"] == 0.0
    assert value["tie_rate"] == pytest.approx(1 / 3)
    both = pl.concat([metrics, metrics.with_columns(pl.lit("dep").alias("variant"))])
    vs = variants(inv={"label": "Reward model", "scorer": "reward_model"},
                  dep={"label": "Listwise", "scorer": "transformers"})
    with caplog.at_level(logging.WARNING, logger="presdep.report.tables"):
        table, counts = build_table1(both, vs)
    named = [r.getMessage() for r in caplog.records if ORDER_INVARIANT_WARNING in r.getMessage()]
    assert len(named) == 1 and named[0].startswith("inv resp_tau_psi: scorer 'reward_model' declares")
    notes = {r["variant"]: r["note"] for r in table.iter_rows(named=True)}
    assert notes["inv"] == ("order-invariant scores: tau-PSI 0.33 comes only from tied scores broken by presented "
                            "position (tau-PSI-b 0.00); nDCG@1 1.00 in every order; the preferred pair flips 0.00 "
                            "(pair flip). Flags: ties (resp); tie-broken (resp)")
    assert notes["dep"].endswith("Flags: ties (resp)")  # ties: both; tie-broken: only the declared one
    assert table.filter(pl.col("variant") == "inv")["flags"][0] == "ties tie-broken"
    _order_invariant_without_tau_psi_or_ties_is_not_named(caplog)


def _order_invariant_without_tau_psi_or_ties_is_not_named(caplog):
    """Not named: tau-PSI 0 (ties, but every ranking the same), or tau-PSI > 0 with no tie at all."""
    rows = rows_of("inv", "tau_psi", {"q1": 0.0}, task="response") + rows_of("inv", "tau_psi_b", {"q1": 0.0},
                                                                             task="response")
    rows += rows_of("inv", "tie_rate", {"q1": 0.5}, task="response")  # ties, but every ranking equal: 0
    rows += rows_of("inv2", "tau_psi", {"q1": 0.1}, task="response") + rows_of("inv2", "tau_psi_b", {"q1": 0.1},
                                                                               task="response")
    rows += rows_of("inv2", "tie_rate", {"q1": 0.0}, task="response")  # no ties: not this warning
    vs = variants(inv={"label": "A", "scorer": "reward_model"}, inv2={"label": "B", "scorer": "reward_model"})
    with caplog.at_level(logging.WARNING, logger="presdep.report.tables"):
        caplog.clear()
        build_table1(pl.DataFrame(rows, schema=SCHEMA), vs)
    assert not any(ORDER_INVARIANT_WARNING in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------ stability


def stability_metrics(flagged: dict[str, list[str]], n: int = 12) -> pl.DataFrame:
    """Jaccard and tau-PSI per query for variants best (the best values), mid and worst; the
    variants in ``flagged`` get those warn_* rows raised on dl19."""
    rows = []
    for v, jac, tau in (("best", 0.99, 0.01), ("mid", 0.6, 0.2), ("worst", 0.3, 0.4)):
        rows += rows_of(v, "jaccard", {f"q{i}": jac + 0.001 * i for i in range(n)})
        rows += rows_of(v, "tau_psi", {f"q{i}": tau + 0.001 * i for i in range(n)})
        for m in FLAGS:
            rows += flag(v, m, 1.0 if m in flagged.get(v, []) else 0.0)
    return pl.DataFrame(rows, schema=SCHEMA)


def test_a_degenerate_cell_is_left_out_of_the_ranking_and_listed_with_its_reason():
    metrics = stability_metrics({"best": ["warn_threshold_keeps_all", "warn_retention_high"]})
    out = analyse_table1(metrics, resamples=200, seed=1)
    jac = out["columns"]["rerank_jaccard"]
    assert jac["flagged"] == {"best": ["dl19: t* keeps every candidate", "dl19: mean retention above 0.90"]}
    assert jac["variants"] == ["mid", "worst"] and "best" not in jac["probabilityFirst"]
    assert jac["probabilityFirst"]["mid"] == 1.0 and "best" not in jac["pairwise"]["mid"]
    assert jac["warnings"][0].startswith("variant(s) ['best'] left out of the ranking")
    assert out["flagged"] == {"rerank_jaccard": jac["flagged"]}
    tau = out["columns"]["rerank_tau_psi"]  # the flags concern the decision at t*, not tau-PSI
    assert tau["flagged"] == {} and tau["variants"][0] == "best"
    json.dumps(out, allow_nan=False)


def test_without_flags_the_best_cell_comes_first():
    jac = analyse_table1(stability_metrics({}), resamples=200, seed=1)["columns"]["rerank_jaccard"]
    assert jac["variants"][0] == "best" and jac["flagged"] == {}


def test_a_column_whose_every_cell_is_degenerate_is_skipped_with_the_reasons():
    metrics = stability_metrics({v: ["warn_few_test_queries"] for v in ("best", "mid", "worst")})
    # a fourth variant without any Jaccard value leaves nothing to rank either
    metrics = pl.concat([metrics, pl.DataFrame(rows_of("empty", "jaccard", {"q0": None, "q1": None}), schema=SCHEMA)])
    out = analyse_table1(metrics, resamples=200, seed=1)
    assert "rerank_jaccard" not in out["columns"]
    assert out["skipped"]["rerank_jaccard"].startswith("every variant's cell is degenerate, nothing to rank: "
                                                       "best (dl19: fewer than 10 test queries)")
    assert set(out["flagged"]["rerank_jaccard"]) == {"best", "mid", "worst"}
    with pytest.raises(StabilityError, match="every variant's cell is degenerate"):
        analyse_column(metrics, "rerank_jaccard", resamples=200)


def test_json_svg_and_printed_table_mark_the_left_out_variant(tmp_path, capsys):
    metrics = stability_metrics({"best": ["warn_threshold_grid_edge"]})
    path = write_table(metrics, tmp_path / "m.parquet", "metrics")
    write_table1_stability([path], tmp_path / "table1.json", tmp_path / "svg", resamples=200, seed=1)
    data = json.loads((tmp_path / "table1.json").read_text())
    assert data["columns"]["rerank_jaccard"]["flagged"] == {"best": ["dl19: t* at the edge of its grid"]}
    svg = (tmp_path / "svg" / "rerank_jaccard.svg").read_text()
    assert "left out, degenerate cell (not ranked): best: dl19: t* at the edge of its grid" in svg
    assert "left out" not in (tmp_path / "svg" / "rerank_tau_psi.svg").read_text()
    p = argparse.ArgumentParser(prog="presdep")
    register(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["stability", str(path), "--column", "rerank_jaccard", "--resamples", "200"])
    assert args.func(args) == 0
    printed = capsys.readouterr()
    line = next(ln for ln in printed.out.splitlines() if ln.startswith("best "))
    assert "left out (degenerate cell, not ranked): dl19: t* at the edge of its grid" in line
    assert "left out of the ranking" in printed.err


def test_svg_footer_is_bounded():
    res = analyse_column(stability_metrics({"best": list(FLAGS)}), "rerank_jaccard", resamples=200)
    res["warnings"] += [f"extra warning {i}" for i in range(10)]
    svg = render_stability_svg(res)
    assert "left out, degenerate cell" in svg and "more (see the JSON)" in svg
    assert np.sum([f"extra warning {i}<" in svg for i in range(10)]) < 10
