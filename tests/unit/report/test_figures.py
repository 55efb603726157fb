"""Figure 1: the automatic choice of the example and the variant points; files are written;
every number the metrics and thresholds stages stored is the figure's."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import matplotlib.text
import numpy as np
import polars as pl
import pytest
from scipy.stats import kendalltau

from presdep.contracts.schemas import read_table, write_table
from presdep.metrics.compute import build_blocks, compute_metrics, rerank_set_values, write_metrics
from presdep.metrics.quality import evaluate_presentations, presented_order, qrels_to_dict
from presdep.metrics.thresholds import write_thresholds
from presdep.report.figure_pair import pair_kendall_tau
from presdep.contracts.errors import InvalidInput
from presdep.report.figures import (
    NEAR_EQUAL_NDCG,
    StoredExample,
    chosen_example,
    draw_figure1,
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


def test_pick_example_never_shows_the_same_set_or_unequal_quality():
    """Pair (0, 1) keeps the same set {d1, d2} at t* = 0.5; (0, 2) and (1, 2) keep different sets
    but their nDCG@10 differ by far more than NEAR_EQUAL_NDCG: no pair shows the figure's title
    (the rule before fell back to (1, 2))."""
    scores = _scores({"q1": [[0.9, 0.8, 0.1, 0.0], [0.8, 0.9, 0.1, 0.0], [0.1, 0.0, 0.9, 0.8]]})
    assert pick_example(scores, QRELS, threshold=0.5) is None


# Case "unequal": q1's shuffles keep different sets with nDCG@10 1.00 and 0.69 (each keeps half
# its pool); q2's keep different sets with equal nDCG@10, but shuffle 0 keeps 10 of 11 (outside
# the retention band, which the rule before ranked above equal quality).
_UNEQUAL = {"q1": [[0.9, 0.8, 0.1, 0.0], [0.3, 0.9, 0.6, 0.1]],
            "q2": [[0.9, 0.8, 0.75, 0.7, 0.65, 0.6, 0.58, 0.56, 0.54, 0.52, 0.1],
                   [0.9, 0.8, 0.75, 0.7, 0.65, 0.4, 0.35, 0.3, 0.25, 0.2, 0.1]]}
# Case "wide tolerance": q1's keep {d1, d2} and {d1, d3} (Jaccard 1/3) with nDCG@10 1.00 and
# 0.96, inside the 0.05 used before but not inside NEAR_EQUAL_NDCG; q2's keep {e1, e2, e3} and
# {e1, e2} (Jaccard 2/3) with equal nDCG@10.
_WIDE = {"q1": [[0.9, 0.8, 0.1, 0.0], [0.9, 0.1, 0.6, 0.0]],
         "q2": [[0.9, 0.8, 0.6, 0.1], [0.9, 0.8, 0.4, 0.1]]}


@pytest.mark.parametrize("case", [_UNEQUAL, _WIDE], ids=["unequal", "wide-tolerance"])
def test_pick_example_takes_the_query_within_the_tolerance_that_keeps_different_sets(case):
    scores = _scores(case)
    ex = pick_example(scores, QRELS, threshold=0.5)
    assert ex.query_id == "q2"
    assert abs(ex.ndcg_a - ex.ndcg_b) <= NEAR_EQUAL_NDCG and ex.jaccard < 1
    # q1's pair, the one the rule before chose, keeps different sets at unequal quality
    q1 = [n for _, n in sorted(_ndcg_of(scores.filter(pl.col("query_id") == "q1")).items())]
    assert abs(q1[0] - q1[1]) > NEAR_EQUAL_NDCG
    assert pick_example(scores.filter(pl.col("query_id") == "q1"), QRELS, threshold=0.5) is None


def _ndcg_of(scores: pl.DataFrame) -> dict[int, float]:
    """presentation -> nDCG@10 of one query's presentations (the metrics stage's function)."""
    (b,) = build_blocks(scores)["random_shuffle"]
    nd = evaluate_presentations([b.query_id], [b.doc_ids], [b.scores], [b.positions], qrels_to_dict(QRELS),
                                ["ndcg@10"])["ndcg@10"][b.query_id]
    return dict(zip(b.presentations.tolist(), nd.tolist()))


def test_pick_example_avoids_a_pair_at_ndcg_zero():
    # q3 has judgements but nothing relevant: its two shuffles tie at nDCG 0 and keep disjoint
    # sets (Jaccard 0); q1's keep {d1, d2} and {d1, d2, d3} at equal nDCG > 0: q1 is shown
    qrels = pl.DataFrame({"query_id": ["q1", "q1", "q3"], "doc_id": ["d1", "d2", "e1"], "relevance": [3, 1, 0]},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    scores = _scores({"q1": [[0.9, 0.8, 0.1, 0.0], [0.9, 0.8, 0.6, 0.0]],
                      "q3": [[0.9, 0.8, 0.1, 0.0], [0.1, 0.0, 0.9, 0.8]]})
    ex = pick_example(scores, qrels, threshold=0.5)
    assert ex.query_id == "q1" and min(ex.ndcg_a, ex.ndcg_b) > 0 and ex.jaccard == pytest.approx(2 / 3)


def test_pick_example_most_different_decisions_among_near_equal_quality():
    """The rule: among pairs within NEAR_EQUAL_NDCG that keep different sets, those that decide
    something first, then the smallest Jaccard; not the smallest nDCG difference first."""
    scores = _scores({
        "q1": [
            [0.9, 0.1, 0.8, 0.6, 0.2, 0.0],  # keeps d1 d3 d4; d2 (grade 1) ranked 5th
            [0.9, 0.1, 0.8, 0.4, 0.2, 0.0],  # keeps d1 d3, same ranking: equal nDCG
            [0.9, 0.1, 0.3, 0.2, 0.7, 0.15],  # keeps d1 d5; d2 ranked 6th: nDCG a little lower
            [0.2, 0.9, 0.1, 0.0, 0.3, 0.4],  # keeps d2, ranks it first: nDCG far below the others
        ],
        # keeps every candidate in shuffle 0, one in shuffle 1: the threshold decides nothing there
        "q2": [[0.9, 0.8, 0.7, 0.6], [0.9, 0.4, 0.3, 0.2]],
    })
    ex = pick_example(scores, QRELS, threshold=0.5)
    # (0, 1) has equal nDCG (Jaccard 2/3), (1, 2) keeps {d1, d3} vs {d1, d5} (1/3), (0, 2) 1/4
    assert (ex.query_id, ex.a, ex.b) == ("q1", 0, 2) and ex.jaccard == pytest.approx(1 / 4)
    assert 0 < abs(ex.ndcg_a - ex.ndcg_b) <= NEAR_EQUAL_NDCG
    # (2, 3) keeps disjoint sets (Jaccard 0) but its quality differs by more than NEAR_EQUAL_NDCG,
    # and q2's pair (Jaccard 1/4, equal nDCG) has a presentation that keeps every candidate
    far = scores.filter(pl.col("presentation").is_in([2, 3]) & (pl.col("query_id") == "q1"))
    assert pick_example(far, QRELS, threshold=0.5) is None
    keeps_all = pick_example(scores.filter(pl.col("query_id") == "q2"), QRELS, threshold=0.5)
    assert keeps_all.kept_a.all() and keeps_all.jaccard == pytest.approx(1 / 4)


def test_pick_example_prefers_pairs_inside_the_retention_band():
    """A presentation that keeps over RETENTION_HIGH of its pool decides by arithmetic: the pair
    (0, 1) and (0, 2) have the smaller Jaccard (1/2) but p0 keeps 10 of 11; (1, 2) keeps 5 and 5."""
    tail = [0.4, 0.35, 0.3, 0.25, 0.1]
    scores = _scores({"q1": [[0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.52, 0.1],
                             [0.95, 0.9, 0.85, 0.8, 0.75, 0.45, *tail],
                             [0.95, 0.9, 0.85, 0.8, 0.45, 0.75, *tail]]})
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    ex = pick_example(scores, qrels, threshold=0.5)
    assert (ex.a, ex.b) == (1, 2) and ex.jaccard == pytest.approx(4 / 6)
    alone = pick_example(scores.filter(pl.col("presentation") < 2), qrels, threshold=0.5)
    assert alone.kept_a.sum() == 10 and alone.jaccard == pytest.approx(0.5)  # shown when nothing better exists


def test_pick_example_ties_go_to_the_first_query_and_pair():
    same = [[0.9, 0.8, 0.1, 0.0], [0.9, 0.1, 0.8, 0.0]]
    qrels = pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["d1", "e1"], "relevance": [3, 3]},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    ex = pick_example(_scores({"q2": same + same, "q1": same + same}), qrels, threshold=0.5)
    assert (ex.query_id, ex.a, ex.b) == ("q1", 0, 1)


def test_pair_kendall_tau_is_tau_a_of_the_strict_rankings():
    ex = pick_example(EXAMPLE, QRELS, threshold=0.5)
    ranks = [np.argsort(presented_order(s, p)) for s, p in ((ex.scores_a, ex.positions_a),
                                                          (ex.scores_b, ex.positions_b))]
    assert pair_kendall_tau(ex) == pytest.approx(kendalltau(*ranks).statistic)
    # tied scores: the metrics stage's tie-break by presented position, not tau-b
    tied = pick_example(_scores({"q1": [[0.9, 0.8, 0.1, 0.0], [0.9, 0.5, 0.1, 0.1]]}), QRELS, threshold=0.6)
    # shuffle 1 shows d4, d1, d2, d3 (positions 0..3): its tied d3 d4 rank d4 d3
    assert pair_kendall_tau(tied) == pytest.approx(kendalltau([0, 1, 2, 3], [0, 1, 3, 2]).statistic)
    assert pair_kendall_tau(tied) != pytest.approx(kendalltau(tied.scores_a, tied.scores_b).statistic)


def _metrics() -> pl.DataFrame:
    rows = []
    for variant, ds, seed, ndcg, jac, tau in [
        ("A", "x", 1, 0.40, 0.50, 0.30), ("A", "x", 2, 0.44, 0.60, 0.20), ("A", "y", 1, 0.50, 0.70, 0.40),
        ("B", "x", None, 0.45, 0.80, 0.55), ("B", "y", None, 0.55, 0.90, 0.65),
    ]:
        # quality cell from the first-stage pass, Jaccard and tau-PSI between random shuffles
        for metric, pert, v in (("ndcg@10", "first_stage", ndcg), ("jaccard", "random_shuffle", jac),
                                ("tau_psi", "random_shuffle", tau)):
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
    assert a["tau_psi"] == pytest.approx(((0.30 + 0.40) / 2 + 0.20) / 2)
    b = pts.filter(pl.col("variant") == "B").row(0, named=True)
    assert (b["ndcg"], b["jaccard"], b["tau_psi"]) == pytest.approx((0.50, 0.85, 0.60))


def test_variant_points_keep_a_variant_without_tau_psi_and_drop_one_without_jaccard():
    m = _metrics()
    pts = variant_points(m.filter(~((pl.col("variant") == "B") & (pl.col("metric") == "tau_psi"))))
    assert pts["variant"].to_list() == ["A", "B"] and pts["tau_psi"].to_list()[1] is None
    pts = variant_points(m.filter(~((pl.col("variant") == "B") & (pl.col("metric") == "jaccard"))))
    assert pts["variant"].to_list() == ["A"] and pts.columns == ["variant", "ndcg", "jaccard", "tau_psi"]


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


def _panel(fig, label: str):
    (ax,) = [a for a in fig.axes if a.get_label() == label]
    return ax


def test_figure1_names_variants_by_label_and_draws_a_degenerate_jaccard_hollow(tmp_path):
    flag = pl.DataFrame([{"dataset": "x", "task": "rerank", "variant": "B", "seed": None,
                          "perturbation": "random_shuffle", "query_id": None, "metric": "warn_threshold_keeps_all",
                          "value": 1.0}], schema_overrides={"seed": pl.Int32, "query_id": pl.String})
    metrics = pl.concat([_metrics(), flag], how="vertical_relaxed")
    stored = stored_example(_run_metrics(), _thresholds())
    svg, png = tmp_path / "f.svg", tmp_path / "f.png"
    figure1(metrics, EXAMPLE, QRELS, stored, svg, png, labels={"A": "Off the shelf", "B": "BSC (x2)"})
    text = svg.read_text()
    assert "Off the shelf" in text and "BSC (x2)" in text and "(degenerate)" not in text
    assert "hollow: Jaccard degenerate (see table1.md)" in text
    ex, grades = chosen_example(EXAMPLE, QRELS, stored)
    fig = draw_figure1(metrics, ex, grades, labels={"A": "Off the shelf", "B": "BSC (x2)"})
    ax_b = _panel(fig, "panel-b")
    # points in variant order: A filled in its colour, B hollow (white face, coloured edge)
    (a, b) = ax_b.collections
    assert tuple(a.get_facecolor()[0]) == tuple(a.get_edgecolor()[0])
    assert tuple(b.get_facecolor()[0]) == (1.0, 1.0, 1.0, 1.0) and tuple(b.get_edgecolor()[0]) != (1.0, 1.0, 1.0, 1.0)
    # panel (c): B (Jaccard 0.85, above A's 0.6) on top, both tau-PSI values written
    ax_c = _panel(fig, "panel-c")
    assert [t.get_text() for t in ax_c.get_yticklabels()] == ["BSC (x2)", "Off the shelf"]
    assert {t.get_text() for t in ax_c.texts} == {"0.600", f"{((0.30 + 0.40) / 2 + 0.20) / 2:.3f}"}
    assert [round(p.get_width(), 6) for p in ax_c.patches] == [0.6, round(((0.30 + 0.40) / 2 + 0.20) / 2, 6)]


def test_figure1_boxes_name_the_presented_slot_and_the_score():
    ex, grades = chosen_example(EXAMPLE, QRELS, stored_example(_run_metrics(), _thresholds()))
    assert (ex.query_id, ex.a, ex.b) == ("q1", 0, 1)
    fig = draw_figure1(_metrics(), ex, grades)
    texts = [t.get_text() for t in _panel(fig, "panel-a").findobj(matplotlib.text.Text)]
    # EXAMPLE shows doc i of shuffle m at position (i + m) % 6, counted from 0: slot = position + 1
    assert "slot 1 · 0.90" in texts and "slot 2 · 0.90" in texts  # d1 in shuffles 0 and 1
    assert "slot 6 · 0.10" in texts and "slot 1 · 0.05" in texts  # d6: positions 5 and 0
    assert not any(d in t for t in texts for d in ex.doc_ids)  # no document ids
    title = _panel(fig, "panel-a").get_title()
    assert f"Kendall τ = {pair_kendall_tau(ex):.2f}" in title and "Jaccard = 0.50" in title


def test_figure1_of_bsc_ensembles_names_the_first_stage_rank():
    """An ensemble's mean score was shown at no one slot: its position is the first-stage rank."""
    ex, grades = chosen_example(EXAMPLE, QRELS, stored_example(_run_metrics(), _thresholds()))
    ax = _panel(draw_figure1(_metrics(), ex, grades, bsc=True), "panel-a")
    texts = [t.get_text() for t in ax.findobj(matplotlib.text.Text)]
    assert "first-stage 1 · 0.90" in texts and not any(t.startswith("slot ") for t in texts)
    assert "two ensembles" in ax.get_title() and "ensemble 0" in ax.get_xticklabels()[0].get_text()


def _words(ax) -> str:
    """Every text of a panel, its line breaks read as spaces."""
    return " ".join(" ".join(t.get_text().split()) for t in ax.findobj(matplotlib.text.Text))


def test_figure1_without_a_qualifying_query_says_so_in_words(tmp_path):
    """q1's shuffles keep different sets at unequal quality, q2's the same set: the rule before
    showed one of them under 'equal quality, different decisions'; now panel (a) says that no
    query qualifies, with the tolerance, and the figure is still written."""
    scores = _scores({"q1": [[0.9, 0.8, 0.1, 0.0], [0.8, 0.9, 0.1, 0.0], [0.1, 0.0, 0.9, 0.8]],
                      "q2": [[0.9, 0.8, 0.1, 0.0], [0.95, 0.85, 0.2, 0.1]]})
    stored = StoredExample(0.5, {"q1": 0.5, "q2": 1.0})
    svg, png = tmp_path / "f.svg", tmp_path / "f.png"
    assert figure1(_metrics(), scores, QRELS, stored, svg, png) is None
    assert svg.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "No example query" in svg.read_text()
    ex, grades = chosen_example(scores, QRELS, stored)
    assert ex is None and grades == {}
    words = _words(_panel(draw_figure1(_metrics(), ex, grades), "panel-a"))
    assert ("No test-half query here has two shuffles within 0.02 nDCG@10 of each other that keep "
            "different documents") in words
    assert "Query" not in words and "equal" not in words.replace("(a) No example query", "")
    bsc = _words(_panel(draw_figure1(_metrics(), None, {}, bsc=True), "panel-a"))
    assert "two ensembles within 0.02 nDCG@10" in bsc


def test_figure1_title_says_equal_or_nearly_equal_with_the_tolerance():
    equal = pick_example(_scores(_WIDE), QRELS, threshold=0.5)  # q2: the same ranking in both
    near = pick_example(_scores({"q1": [[0.9, 0.1, 0.8, 0.6, 0.2, 0.0], [0.9, 0.1, 0.3, 0.2, 0.7, 0.15]]}),
                        QRELS, threshold=0.5)  # d2 ranked 5th and 6th
    assert equal.ndcg_a == equal.ndcg_b and 0 < abs(near.ndcg_a - near.ndcg_b) <= NEAR_EQUAL_NDCG
    titles = [_panel(draw_figure1(_metrics(), ex, {}), "panel-a").get_title() for ex in (equal, near)]
    assert "nDCG@10 equal," in titles[0]
    assert "nDCG@10 nearly equal (within 0.02)," in titles[1]


def test_figure1_refuses_to_draw_a_pair_that_contradicts_its_title():
    ex = pick_example(EXAMPLE, QRELS, threshold=0.5)
    for bad in (replace(ex, ndcg_b=ex.ndcg_a - 0.098), replace(ex, jaccard=1.0)):
        with pytest.raises(InvalidInput, match="no example of equal quality and different decisions"):
            draw_figure1(_metrics(), bad, {})
