"""Figure 1: the automatic choice of the example and the variant points; files are written."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import polars as pl
import pytest

from presdep.figures import figure1, pick_example, shown_ranks, variant_points

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


def test_pick_example_falls_back_to_smallest_ndcg_difference():
    scores = _scores({"q1": [[0.9, 0.8, 0.1, 0.0], [0.8, 0.9, 0.1, 0.0], [0.1, 0.0, 0.9, 0.8]]})
    ex = pick_example(scores, QRELS, threshold=0.5)
    # pair (0, 1) swaps grades 3 and 1 at the top: the smallest difference of the three pairs
    assert (ex.a, ex.b) == (0, 1)
    assert ex.ndcg_a != pytest.approx(ex.ndcg_b)


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


def test_figure1_writes_svg_and_png(tmp_path):
    svg, png = tmp_path / "fig" / "figure1.svg", tmp_path / "fig" / "figure1.png"
    ex = figure1(_metrics(), EXAMPLE, QRELS, 0.5, svg, png)
    assert ex.query_id == "q1"
    root = ET.fromstring(svg.read_bytes())
    assert root.tag.endswith("svg")
    text = svg.read_text()
    for needle in ("Query q1", "nDCG@10", "Jaccard", "retained in only one shuffle"):
        assert needle in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = svg.read_bytes()
    figure1(_metrics(), EXAMPLE, QRELS, 0.5, svg, png)
    assert svg.read_bytes() == first  # deterministic output
    assert sorted(p.name for p in svg.parent.iterdir()) == ["figure1.png", "figure1.svg"]  # no temp files left


def test_shown_ranks_top_k_and_window_around_the_cuts():
    assert shown_ranks(6, 10, (4, 2), 30) == list(range(6))
    assert shown_ranks(100, 10, (75, 77), 30) == list(range(10)) + list(range(71, 81))
    assert len(shown_ranks(100, 10, (20, 90), 30)) == 30


def test_figure1_from_files_for_a_trained_run(tmp_path):
    """A trained run key ('oc_sft/seed1') names its scores and threshold files while its
    metrics store the variant name 'oc_sft' and seed 1: the figure must still be drawn."""
    import json

    from presdep.figures import figure1_from_files
    from presdep.schemas import write_table

    metrics = _metrics().filter((pl.col("task") == "rerank") & pl.col("query_id").is_null())
    metrics = metrics.with_columns(pl.col("variant").replace({"A": "oc_sft"}))
    mpath = write_table(metrics, tmp_path / "metrics" / "oc_sft" / "seed1" / "x.parquet", "metrics")
    first = EXAMPLE.filter(pl.col("presentation") == 0).with_columns(
        pl.lit("first_stage").alias("perturbation"), pl.col("position").rank("ordinal").over("query_id") - 1)
    scores = pl.concat([EXAMPLE, first], how="vertical_relaxed").with_columns(
        pl.col("presentation", "position").cast(pl.Int32), pl.lit(0, dtype=pl.Int32).alias("prompt"),
        pl.col("position").cast(pl.Int32).alias("slot"), *[pl.lit(None, dtype=pl.Float32).alias(f"p{i}") for i in range(4)])
    spath = write_table(scores, tmp_path / "scores" / "oc_sft" / "seed1" / "x.parquet", "scores")
    qpath = write_table(QRELS, tmp_path / "qrels.parquet", "qrels")
    tpath = tmp_path / "thresholds" / "oc_sft" / "seed1" / "x.json"
    tpath.parent.mkdir(parents=True)
    tpath.write_text(json.dumps({"t_star": 0.5, "split_seed": 20260610, "canonical_presentation": 0,
                                 "dev_queries": ["q2"], "test_queries": ["q1"], "grid_size": 41}))
    svg, png = tmp_path / "f.svg", tmp_path / "f.png"
    ex = figure1_from_files([mpath], spath, qpath, tpath, svg, png, variant="oc_sft/seed1", dataset="x")
    assert ex.query_id == "q1" and (ex.a, ex.b) == (0, 1)  # a test-half query
    assert "oc_sft" in svg.read_text()
    tpath.write_text(json.dumps({"t_star": 0.5}))
    with pytest.raises(ValueError, match="lacks key"):
        figure1_from_files([mpath], spath, qpath, tpath, svg, png, variant="oc_sft/seed1", dataset="x")
