"""Figure 1: the automatic choice of the example and the variant points; files are written;
every number the metrics and thresholds stages stored is the figure's."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import polars as pl
import pytest

from presdep.contracts.schemas import read_table, write_table
from presdep.metrics.compute import build_blocks, compute_metrics, rerank_set_values, write_metrics
from presdep.metrics.thresholds import write_thresholds
from presdep.report.figures import (
    figure1,
    figure1_from_files,
    pick_example,
    shown_ranks,
    stored_example,
    variant_points,
)

QRELS = pl.DataFrame(
    {"query_id": ["q1", "q1", "q2", "q2"], "doc_id": ["d1", "d2", "e1", "e2"], "relevance": [3, 1, 2, 1]},
    schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
)


def _scores(presentations: dict[str, list[list[float]]]) -> pl.DataFrame:
    rows = []
    for q, pres in presentations.items():
        docs = [f"{'d' if q == 'q1' else 'e'}{i + 1}" for i in range(len(pres[0]))]
        for m, scores in enumerate(pres):
            for pos, (d, s) in enumerate(zip(docs, scores)):
                rows.append({"query_id": q, "doc_id": d, "perturbation": "random_shuffle",
                             "presentation": m, "position": (pos + m) % len(docs), "score": s})
    return pl.DataFrame(rows)


EXAMPLE = _scores(
    {
        # same order in 0, 1 and 3 (equal nDCG), different magnitudes -> different retained sets
        "q1": [
            [0.9, 0.8, 0.7, 0.6, 0.2, 0.1],
            [0.9, 0.55, 0.3, 0.2, 0.1, 0.05],
            [0.4, 0.3, 0.9, 0.2, 0.1, 0.0],
            [0.9, 0.8, 0.7, 0.45, 0.2, 0.1],
        ],
        # equal nDCG, identical retained sets
        "q2": [[0.9, 0.8, 0.1, 0.0], [0.95, 0.85, 0.2, 0.1]],
    }
)


def test_pick_example_largest_disagreement_among_equal_ndcg():
    ex = pick_example(EXAMPLE, QRELS, threshold=0.5)
    assert (ex.query_id, ex.a, ex.b) == ("q1", 0, 1)
    assert ex.ndcg_a == pytest.approx(ex.ndcg_b, abs=1e-12)
    assert ex.jaccard == pytest.approx(2 / 4)


def test_pick_example_prefers_different_decisions_to_a_smaller_ndcg_difference():
    scores = _scores({"q1": [[0.9, 0.8, 0.1, 0.0], [0.8, 0.9, 0.1, 0.0], [0.1, 0.0, 0.9, 0.8]]})
    ex = pick_example(scores, QRELS, threshold=0.5)
    # pair (0, 1) has the smallest nDCG difference but keeps the same set {d1, d2} at t* = 0.5;
    # (0, 2) and (1, 2) keep different sets, and of these (1, 2) differs least in nDCG
    assert (ex.a, ex.b) == (1, 2) and ex.jaccard == 0.0
    assert ex.ndcg_a != pytest.approx(ex.ndcg_b)


def test_pick_example_avoids_a_pair_at_ndcg_zero():
    # q3 has judgements but nothing relevant: its two shuffles tie at nDCG 0 and keep different
    # sets; q1's pair keeps different sets too, with unequal nDCG > 0: q1 is shown
    qrels = pl.DataFrame({"query_id": ["q1", "q1", "q3"], "doc_id": ["d1", "d2", "e1"], "relevance": [3, 1, 0]},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    scores = _scores({"q1": [[0.9, 0.8, 0.1, 0.0], [0.1, 0.9, 0.8, 0.0]],
                      "q3": [[0.9, 0.8, 0.1, 0.0], [0.1, 0.0, 0.9, 0.8]]})
    ex = pick_example(scores, qrels, threshold=0.5)
    assert ex.query_id == "q1" and min(ex.ndcg_a, ex.ndcg_b) > 0 and ex.jaccard < 1


def _metrics() -> pl.DataFrame:
    rows = []
    for variant, ds, seed, ndcg, jac in [
        ("A", "x", 1, 0.40, 0.50), ("A", "x", 2, 0.44, 0.60), ("A", "y", 1, 0.50, 0.70),
        ("B", "x", None, 0.45, 0.80), ("B", "y", None, 0.55, 0.90),
    ]:
        # quality cell from the first-stage pass, Jaccard between random shuffles
        for metric, pert, v in (("ndcg@10", "first_stage", ndcg), ("jaccard", "random_shuffle", jac)):
            rows.append({"dataset": ds, "task": "rerank", "variant": variant, "seed": seed,
                         "perturbation": pert, "query_id": None, "metric": metric, "value": v})
            # rows that must be ignored: per-query, other perturbation, other task
            rows.append({**rows[-1], "query_id": "q1", "value": 0.0})
            rows.append({**rows[-2], "perturbation": "within_chunk", "value": 0.0})
            rows.append({**rows[-3], "task": "qa", "value": 0.0})
        # the shuffles' nDCG is not the quality cell
        rows.append({**rows[-4], "perturbation": "random_shuffle", "metric": "ndcg@10", "value": 0.0})
    return pl.DataFrame(rows, schema_overrides={"seed": pl.Int32, "query_id": pl.String})


def test_variant_points_mean_over_datasets_then_seeds():
    pts = variant_points(_metrics())
    a = pts.filter(pl.col("variant") == "A").row(0, named=True)
    # seed 1: datasets x and y; seed 2: dataset x only (Table 1's order: datasets, then seeds)
    assert a["ndcg"] == pytest.approx(((0.40 + 0.50) / 2 + 0.44) / 2)
    assert a["jaccard"] == pytest.approx(((0.50 + 0.70) / 2 + 0.60) / 2)
    b = pts.filter(pl.col("variant") == "B").row(0, named=True)
    assert (b["ndcg"], b["jaccard"]) == pytest.approx((0.50, 0.85))


def _full_scores() -> pl.DataFrame:
    """EXAMPLE as a scores file holds it: with its first-stage pass and every contract column."""
    first = EXAMPLE.filter(pl.col("presentation") == 0).with_columns(
        pl.lit("first_stage").alias("perturbation"), pl.col("position").rank("ordinal").over("query_id") - 1)
    return pl.concat([EXAMPLE, first], how="vertical_relaxed").with_columns(
        pl.col("presentation", "position").cast(pl.Int32), pl.lit(0, dtype=pl.Int32).alias("prompt"),
        pl.col("position").cast(pl.Int32).alias("slot"), *[pl.lit(None, dtype=pl.Float32).alias(f"p{i}") for i in range(4)])


def _thresholds(t_star: float = 0.5, test: tuple[str, ...] = ("q1", "q2")) -> dict:
    return {"t_star": t_star, "split_seed": 20260610, "canonical_presentation": 0, "grid_size": 41,
            "dev_queries": sorted({"q1", "q2"} - set(test)), "test_queries": list(test)}


def _run_metrics(variant: str = "ots", seed: int | None = None, **thr) -> pl.DataFrame:
    """The metrics stage's own output for EXAMPLE (dataset x)."""
    return compute_metrics(_full_scores(), QRELS, dataset="x", task="rerank", variant=variant, seed=seed,
                           thresholds=_thresholds(**thr))


def test_figure1_writes_svg_and_png(tmp_path):
    svg, png = tmp_path / "fig" / "figure1.svg", tmp_path / "fig" / "figure1.png"
    ex = figure1(_metrics(), EXAMPLE, QRELS, stored_example(_run_metrics(), _thresholds()), svg, png)
    assert ex.query_id == "q1"
    root = ET.fromstring(svg.read_bytes())
    assert root.tag.endswith("svg")
    text = svg.read_text()
    for needle in ("Query q1", "nDCG@10", "Jaccard", "retained in only one shuffle"):
        assert needle in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = svg.read_bytes()
    figure1(_metrics(), EXAMPLE, QRELS, stored_example(_run_metrics(), _thresholds()), svg, png)
    assert svg.read_bytes() == first  # deterministic output
    assert sorted(p.name for p in svg.parent.iterdir()) == ["figure1.png", "figure1.svg"]  # no temp files left


def test_shown_ranks_top_k_and_window_around_the_cuts():
    assert shown_ranks(6, 10, (4, 2), 30) == list(range(6))
    assert shown_ranks(100, 10, (75, 77), 30) == list(range(10)) + list(range(71, 81))
    assert len(shown_ranks(100, 10, (20, 90), 30)) == 30


def test_figure1_from_files_for_a_trained_run(tmp_path):
    """A trained run key ('oc_sft/seed1') names its scores, threshold and metrics files while its
    metrics store the variant name 'oc_sft' and seed 1: the figure must still be drawn."""
    others = _metrics().filter((pl.col("task") == "rerank") & pl.col("query_id").is_null()
                               & (pl.col("variant") != "A"))
    opath = write_table(others, tmp_path / "metrics" / "bm25" / "x.parquet", "metrics")
    run = _run_metrics("oc_sft", 1, test=("q1",))
    mpath = write_metrics(run, tmp_path / "metrics" / "oc_sft" / "seed1" / "x.parquet")
    spath = write_table(_full_scores(), tmp_path / "scores" / "oc_sft" / "seed1" / "x.parquet", "scores")
    qpath = write_table(QRELS, tmp_path / "qrels.parquet", "qrels")
    tpath = tmp_path / "thresholds" / "oc_sft" / "seed1" / "x.json"
    tpath.parent.mkdir(parents=True)
    write_thresholds(_thresholds(test=("q1",)), tpath)
    svg, png = tmp_path / "f.svg", tmp_path / "f.png"
    ex = figure1_from_files([opath, mpath], spath, qpath, tpath, svg, png, example_metrics_path=mpath,
                            variant="oc_sft/seed1", dataset="x")
    assert ex.query_id == "q1" and (ex.a, ex.b) == (0, 1)  # a test-half query
    assert "oc_sft" in svg.read_text()
    tpath.write_text(json.dumps({"t_star": 0.5}))
    with pytest.raises(ValueError, match="lacks key"):
        figure1_from_files([opath, mpath], spath, qpath, tpath, svg, png, example_metrics_path=mpath,
                           variant="oc_sft/seed1", dataset="x")


def _stored(metrics: pl.DataFrame, metric: str, query_id: str | None, perturbation: str = "random_shuffle") -> float:
    hit = metrics.filter((pl.col("metric") == metric) & (pl.col("perturbation") == perturbation)
                         & (pl.col("query_id").is_null() if query_id is None else pl.col("query_id") == query_id))
    assert hit.height == 1, (metric, query_id, hit)
    return hit["value"][0]


def test_figure1_numbers_are_the_metrics_files(tmp_path):
    """t*, the example query's Jaccard and the variant points are read from what the thresholds
    and metrics stages wrote; the one pair-level number no file holds (the two shuffles'
    Jaccard) is what the metrics stage computes for those two shuffles."""
    mpath = write_metrics(_run_metrics(), tmp_path / "metrics" / "ots" / "x.parquet")
    spath = write_table(_full_scores(), tmp_path / "scores.parquet", "scores")
    qpath = write_table(QRELS, tmp_path / "qrels.parquet", "qrels")
    tpath = write_thresholds(_thresholds(), tmp_path / "thresholds.json")
    svg, png = tmp_path / "f.svg", tmp_path / "f.png"

    def draw():
        return figure1_from_files([mpath], spath, qpath, tpath, svg, png, example_metrics_path=mpath,
                                  variant="ots", dataset="x")

    ex = draw()
    metrics = read_table(mpath, "metrics")
    assert ex.t_star == _stored(metrics, "t_star", None)
    assert ex.query_jaccard == _stored(metrics, "jaccard", ex.query_id)
    assert ex.presentations == 4
    # per-presentation nDCG is not stored; it lies within the stored worst and best of its query
    for nd in (ex.ndcg_a, ex.ndcg_b):
        assert _stored(metrics, "ndcg10_shuffle_worst", ex.query_id) <= nd <= _stored(
            metrics, "ndcg10_shuffle_best", ex.query_id)
    two = EXAMPLE.filter((pl.col("query_id") == ex.query_id) & pl.col("presentation").is_in([ex.a, ex.b]))
    (pair,) = build_blocks(two)["random_shuffle"]
    relevant = np.zeros(len(pair.doc_ids), dtype=bool)  # the pair Jaccard does not depend on relevance
    assert ex.jaccard == rerank_set_values(pair, relevant, ex.t_star)["jaccard"]
    # panel (b): the aggregate rows
    point = variant_points(metrics).row(0, named=True)
    assert point["ndcg"] == _stored(metrics, "ndcg@10", None, "first_stage")
    assert point["jaccard"] == _stored(metrics, "jaccard", None)
    text = svg.read_text()
    assert f"mean over all 4 shuffles: {ex.query_jaccard:.2f}" in text and f"t* = {ex.t_star:.3g}" in text

    # A value the file holds is taken from the file, never recomputed from the scores.
    tampered = metrics.with_columns(
        pl.when((pl.col("metric") == "jaccard") & (pl.col("query_id") == ex.query_id))
        .then(0.123).otherwise(pl.col("value")).alias("value"))
    write_metrics(tampered, mpath)
    assert draw().query_jaccard == 0.123
    assert "mean over all 4 shuffles: 0.12" in svg.read_text()

    # Metrics computed at another t* than the artifact's are stale: refused.
    write_thresholds(_thresholds(t_star=0.4), tpath)
    with pytest.raises(ValueError, match="re-run the metrics"):
        draw()


def test_figure1_names_variants_by_label_and_marks_a_degenerate_jaccard(tmp_path):
    flag = pl.DataFrame([{"dataset": "x", "task": "rerank", "variant": "B", "seed": None,
                          "perturbation": "random_shuffle", "query_id": None, "metric": "warn_threshold_keeps_all",
                          "value": 1.0}], schema_overrides={"seed": pl.Int32, "query_id": pl.String})
    metrics = pl.concat([_metrics(), flag], how="vertical_relaxed")
    svg, png = tmp_path / "f.svg", tmp_path / "f.png"
    figure1(metrics, EXAMPLE, QRELS, stored_example(_run_metrics(), _thresholds()), svg, png,
            labels={"A": "Off the shelf", "B": "BSC (x2)"})
    text = svg.read_text()
    assert "Off the shelf" in text and "BSC (x2) (degenerate)" in text
    assert "Off the shelf (degenerate)" not in text
