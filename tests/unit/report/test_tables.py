"""Table 1 assembly: cells, counts (sources, passes, warnings) and the BSC K-curve, by hand."""

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.report.tables import bsc_curve, build_table1, to_markdown, write_bsc_curve, write_table1

SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}


def _rows(variant, seed, dataset, metric, pert, per_query, task="rerank"):
    out = [{"dataset": dataset, "task": task, "variant": variant, "seed": seed, "perturbation": pert,
            "query_id": q, "metric": metric, "value": v} for q, v in per_query.items()]
    vals = [v for v in per_query.values() if v is not None]
    out.append({**out[0], "query_id": None, "value": sum(vals) / len(vals)})
    return out


def _metrics():
    rows = []
    # untrained variant on two datasets of different sizes: a dataset counts once, whatever its size
    rows += _rows("ots", None, "a", "ndcg@10", "first_stage", {"q1": 0.2, "q2": 0.4})
    rows += _rows("ots", None, "b", "ndcg@10", "first_stage", {"r1": 0.9, "r2": 0.9, "r3": 0.6, "r4": 0.6})
    rows += _rows("ots", None, "a", "ndcg@10", "random_shuffle", {"q1": 0.0, "q2": 0.0})  # not the quality cell
    rows += _rows("ots", None, "a", "tau_psi", "random_shuffle", {"q1": 0.1, "q2": 0.3})
    rows += _rows("ots", None, "a", "tau_psi_b", "random_shuffle", {"q1": 0.05, "q2": 0.15})
    rows += _rows("ots", None, "a", "jaccard", "random_shuffle", {"q2": 0.5})
    rows += _rows("ots", None, "a", "warn_threshold_keeps_all", "random_shuffle", {None: 1.0})[1:]
    rows += _rows("ots", None, "a", "warn_queries_without_relevant", "random_shuffle", {None: 2.0})[1:]
    rows += _rows("ots", None, "a", "passes_per_query", "random_shuffle", {None: 11.0})[1:]
    # trained variant: seeds 1 (datasets a, b) and 2 (dataset a)
    rows += _rows("oc", 1, "a", "ndcg@10", "first_stage", {"q1": 0.5})
    rows += _rows("oc", 1, "b", "ndcg@10", "first_stage", {"r1": 0.7})
    rows += _rows("oc", 2, "a", "ndcg@10", "first_stage", {"q1": 0.3})
    # BSC curve rows (aggregate only)
    for seed, ds, k, v in ((None, "a", 1, 0.4), (None, "b", 1, 0.6), (None, "a", 2, 0.3)):
        rows.append({"dataset": ds, "task": "rerank", "variant": "bsc", "seed": seed,
                     "perturbation": f"bsc_curve_k{k}", "query_id": None, "metric": "tau_psi", "value": v})
    return pl.DataFrame(rows, schema=SCHEMA)


def variants(**specs) -> dict[str, Variant]:
    """Variant records as the config builds them; the scorer decides only the hosted row's tau-PSI."""
    base = {"scorer": "identity", "chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4}
    return {name: Variant.checked({**base, **spec}, name) for name, spec in specs.items()}


VARIANTS = variants(ots={"label": "Off the shelf"}, oc={"label": "OC-SFT"}, bsc={"label": "BSC"},
                    jina={"skip": "no weights here"})


def test_cells_are_means_over_datasets_then_seeds():
    table, counts = build_table1(_metrics(), VARIANTS)
    rows = {r["variant"]: r for r in table.iter_rows(named=True)}
    assert list(rows) == ["ots", "oc", "bsc", "jina"]
    assert rows["ots"]["rerank_ndcg10"] == pytest.approx((0.3 + 0.75) / 2)
    assert rows["oc"]["rerank_ndcg10"] == pytest.approx(((0.5 + 0.7) / 2 + 0.3) / 2)
    assert rows["ots"]["rerank_tau_psi"] == pytest.approx(0.2)
    assert rows["ots"]["rerank_tau_psi_b"] == pytest.approx(0.1)
    assert rows["ots"]["rerank_jaccard"] == pytest.approx(0.5)
    assert rows["jina"]["note"] == "skipped: no weights here" and rows["jina"]["rerank_ndcg10"] is None
    c = {(r["variant"], r["column"]): r for r in counts.iter_rows(named=True)}
    assert c[("ots", "rerank_ndcg10")]["queries"] == 6 and c[("ots", "rerank_ndcg10")]["datasets"] == 2
    assert c[("oc", "rerank_ndcg10")]["seeds"] == 2
    assert c[("ots", "rerank_ndcg10")]["perturbation"] == "first_stage"
    assert "headline" in c[("ots", "rerank_tau_psi")]["source"] and "tau-a" in c[("ots", "rerank_tau_psi")]["source"]
    assert "not the headline" in c[("ots", "rerank_tau_psi_b")]["source"]
    assert c[("ots", "rerank_jaccard")]["warnings"] == (
        "a: t* keeps every candidate; a: queries without a relevant document in the pool (2)")
    assert c[("ots", "rerank_ndcg10")]["warnings"] == ""
    assert c[("ots", "rerank_tau_psi")]["passes_per_query"] == 11.0
    md = to_markdown(table)
    assert "tau-PSI (tau-a)" in md and "Off the shelf" in md
    # the legend defines the flags the notes use, once each, and no other
    assert md.count("- **degenerate**:") == 1 and "- **chance**" not in md


def test_bsc_passes_per_query_are_one_plus_e_times_k_not_a_k_curve_average():
    """METHODS v3: the counts state BSC's passes per query (1 first-stage + E*K shuffles)."""
    rows = _rows("bsc", None, "a", "tau_psi", "random_shuffle", {"q1": 0.1})
    rows += _rows("bsc", None, "a", "passes_per_query", "random_shuffle", {None: 1.0 + 4 * 2})[1:]
    for k in (1, 2):  # the K-curve's own cost rows must not be averaged in (7.67 instead of 9 before)
        rows += _rows("bsc", None, "a", "passes_per_query", f"bsc_curve_k{k}", {None: 1.0 + 4 * k})[1:]
    _, counts = build_table1(pl.DataFrame(rows, schema=SCHEMA), variants(bsc={"label": "BSC (x2)", "bsc_k": 2}))
    assert counts.filter(pl.col("column") == "rerank_tau_psi")["passes_per_query"].to_list() == [9.0]


def test_markdown_names_every_non_paper_rule():
    table, _ = build_table1(_metrics(), VARIANTS)
    md = to_markdown(table, departures=["shuffles drawn per query: dl19"])
    assert "Not the paper's protocol: shuffles drawn per query: dl19." in md
    assert "Not the paper's protocol" not in to_markdown(table)


def test_bsc_curve_and_files(tmp_path):
    curve = bsc_curve(_metrics())
    assert curve.select("K", "value", "datasets").rows() == [(1, pytest.approx(0.5), 2), (2, pytest.approx(0.3), 1)]
    from presdep.contracts.schemas import write_table

    p = write_table(_metrics(), tmp_path / "m.parquet", "metrics")
    out = {n: tmp_path / "r" / n for n in ("t.csv", "t.md", "c.csv", "bsc.csv")}
    table = write_table1([p], VARIANTS, out["t.csv"], out["t.md"], out["c.csv"])
    assert sorted(f.name for f in out["t.csv"].parent.iterdir()) == ["c.csv", "t.csv", "t.md"], "Table 1 only"
    assert pl.read_csv(out["t.csv"]).columns == table.columns
    assert table.columns[:10] == ["variant", "rerank_ndcg10", "rerank_tau_psi", "rerank_jaccard", "qa_ndcg10",
                                  "qa_tau_psi", "qa_answer_flip", "resp_ndcg1", "resp_tau_psi", "resp_pair_flip"]
    assert "warnings" in pl.read_csv(out["c.csv"]).columns
    written = write_bsc_curve([p], out["bsc.csv"])
    assert out["bsc.csv"].read_text() == curve.write_csv(float_precision=6)
    assert written.equals(curve) and pl.read_csv(out["bsc.csv"]).height == 2


def test_bsc_curve_without_metrics_files_is_a_header(tmp_path):
    out = tmp_path / "bsc.csv"
    write_bsc_curve([], out)
    assert out.read_text() == "variant,task,rule,K,r,metric,value,datasets,seeds\n"


def test_adaptive_bsc_rows_sit_beside_the_k_curve():
    adaptive = pl.DataFrame([
        {"dataset": d, "task": "rerank", "variant": "bsc", "seed": None, "perturbation": "bsc_adaptive_r2",
         "query_id": None, "metric": "agreement", "value": v} for d, v in (("a", 1.0), ("b", 0.5))])
    curve = bsc_curve(pl.concat([_metrics(), adaptive.cast(_metrics().schema)]))
    assert curve.filter(pl.col("rule") == "fixed").select("K", "r", "value").rows() == [
        (1, None, pytest.approx(0.5)), (2, None, pytest.approx(0.3))]
    assert curve.filter(pl.col("rule") == "adaptive").select("K", "r", "metric", "value", "datasets").rows() == [
        (None, 2, "agreement", pytest.approx(0.75), 2)]


def test_degenerate_threshold_fires_from_scores_to_counts(caplog):
    """A constructed run whose t* sits below every score: every shuffle keeps the whole pool,
    so Jaccard reads 1 by construction; the metrics job logs it and the counts file lists it."""
    import logging

    from presdep.metrics.compute import compute_metrics

    docs = ["d1", "d2", "d3", "d4"]
    qrels = pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["d1", "d2"], "relevance": [1, 2]},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    rows = []
    # shuffles present the docs in different orders with different scores, all within [1, 2]
    orders = {0: [0, 1, 2, 3], 1: [3, 2, 1, 0], 2: [1, 3, 0, 2]}
    for q in ("q1", "q2", "q3"):  # q3 has no judged document at all
        for pert, ms in (("first_stage", [0]), ("random_shuffle", [0, 1, 2])):
            for m in ms:
                for pos, i in enumerate(orders[m]):
                    rows.append({"query_id": q, "doc_id": docs[i], "perturbation": pert, "presentation": m,
                                 "position": pos, "prompt": 0, "slot": pos, "score": 1.0 + (i * (m + 1) % 4) / 4})
    scores = pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))
    thresholds = {"t_star": 0.5, "split_seed": 1, "canonical_presentation": 0, "dev_queries": [],
                  "test_queries": ["q1", "q2", "q3"], "grid_size": 41}
    with caplog.at_level(logging.WARNING):
        metrics = compute_metrics(scores, qrels, dataset="a", task="rerank", variant="ots", seed=None,
                                  thresholds=thresholds)
    assert any("keeps every candidate" in r.getMessage() for r in caplog.records)
    assert any("no relevant document" in r.getMessage() for r in caplog.records)
    agg = {r["metric"]: r["value"] for r in metrics.filter(pl.col("query_id").is_null()
                                                          & (pl.col("perturbation") == "random_shuffle")).iter_rows(named=True)}
    assert agg["warn_threshold_keeps_all"] == 1.0 and agg["warn_threshold_keeps_none"] == 0.0
    assert agg["warn_queries_without_relevant"] == 1.0  # q3
    assert agg["jaccard"] == 1.0 and agg["set_flip"] == 0.0  # the misleading "perfectly stable" reading
    _, counts = build_table1(metrics, variants(ots={"label": "Off the shelf"}))
    cell = counts.filter(pl.col("column") == "rerank_jaccard").row(0, named=True)
    assert cell["warnings"] == ("a: t* keeps every candidate; a: mean retention above 0.90; "
                                "a: fewer than 10 test queries; "
                                "a: queries without a relevant document in the pool (1)")


def test_students_of_one_label_make_one_row_and_a_clash_is_an_error():
    """A trained objective is one student per task pool: its cells come from different variants."""
    rows = _rows("oc_rerank", 42, "a", "ndcg@10", "first_stage", {"q1": 0.6})
    rows += _rows("oc_qa", 42, "h", "ndcg@10", "first_stage", {"x1": 0.8}, task="qa")
    students = variants(oc_rerank={"label": "OC-SFT", "note": "reranking pool"}, oc_qa={"label": "OC-SFT"})
    table, counts = build_table1(pl.DataFrame(rows, schema=SCHEMA), students)
    assert table.height == 1
    row = table.row(0, named=True)
    assert row["variant"] == "oc_rerank+oc_qa" and row["label"] == "OC-SFT"
    assert row["note"] == "nDCG@10 0.60 on the first-stage order. reranking pool"  # the verdict, then the config's note
    assert row["rerank_ndcg10"] == pytest.approx(0.6) and row["qa_ndcg10"] == pytest.approx(0.8)
    assert {r["variant"] for r in counts.iter_rows(named=True)} == {"oc_rerank", "oc_qa"}, "counts stay per variant"
    clash = _rows("oc_qa", 42, "a", "ndcg@10", "first_stage", {"q1": 0.1})
    with pytest.raises(ValueError, match="share the label 'OC-SFT' and both fill \\['rerank_ndcg10'\\]"):
        build_table1(pl.DataFrame(rows + clash, schema=SCHEMA), students)


def test_hosted_rows_report_no_tau_psi_and_skipped_datasets_are_named():
    rows = _rows("gpt", None, "a", "ndcg@10", "first_stage", {"q1": 0.5})
    rows += _rows("gpt", None, "a", "tau_psi", "random_shuffle", {"q1": 0.4})
    table, _ = build_table1(pl.DataFrame(rows, schema=SCHEMA), variants(gpt={"label": "GPT", "scorer": "hosted"}))
    row = table.row(0, named=True)
    assert row["rerank_ndcg10"] == pytest.approx(0.5) and row["rerank_tau_psi"] is None
    assert "tau-PSI not reported" in row["note"]
    md = to_markdown(table, skipped_datasets={"legal-a": "proprietary: supply its files"})
    assert "Skipped dataset legal-a: proprietary: supply its files" in md
