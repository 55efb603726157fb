"""Figure 1's layout: axis limits inside the metrics' range, labels that cannot overlap, and,
on drawn figures (4 and 11 variants, and a finished default run where one is present), every
text inside the canvas, no two texts overlapping, no point hidden."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.text
import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import yaml

from presdep.contracts.schemas import SCHEMAS
from presdep.report.figure_layout import axis_limits, spread_labels
from presdep.report.figure_variants import marker_sizes
from presdep.report.figures import NEAR_EQUAL_NDCG, chosen_example, draw_figure1, pick_example, read_figure1_inputs

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- pure geometry


def test_axis_limits_give_near_equal_values_a_minimum_span():
    a, b = axis_limits([0.4061, 0.4062])
    assert b - a == pytest.approx(0.2)
    assert a < 0.4061 and 0.4062 < b and (a + b) / 2 == pytest.approx(0.40615)


def test_axis_limits_stay_inside_the_range_at_its_edge():
    a, b = axis_limits([0.97, 1.0])
    assert b == 1.0 and a == pytest.approx(0.8)
    a, b = axis_limits([0.3, 1.0])  # padded past 1, shifted back, not widened
    assert b == 1.0 and b - a == pytest.approx(0.7 * 1.16)
    a, b = axis_limits([0.0, 0.01])
    assert (a, b) == (0.0, pytest.approx(0.2))


def test_axis_limits_of_the_whole_range_are_the_range():
    assert axis_limits([0.0, 1.0]) == (0.0, 1.0)
    assert axis_limits([0.0, 0.5, 1.0], min_span=0.5) == (0.0, 1.0)
    assert axis_limits([]) == (0.0, 1.0)
    assert axis_limits([1.7, 0.9]) == (pytest.approx(0.8), 1.0)  # out of range values are clipped


def test_spread_labels_keeps_order_and_gaps_inside_bounds():
    wanted = [0.50, 0.50, 0.51, 0.10, 2.90, 0.0]
    got = spread_labels(wanted, 0.2, 0.0, 3.0)
    order = np.lexsort((np.arange(len(wanted)), wanted))
    assert np.all(np.diff(got[order]) >= 0.2 - 1e-12)  # same order, one label height apart
    assert got.min() >= 0.1 - 1e-12 and got.max() <= 2.9 + 1e-12  # every label inside [0, 3]
    # the bottom label is held at the bound and pushes the others up; the top one stays put
    assert got[[5, 3, 0, 1, 2]] == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9])
    assert got[4] == pytest.approx(2.9)
    # crowded labels with room around them sit symmetrically about their mean wish
    crowded = spread_labels([0.50, 0.50, 0.51], 0.2, 0.0, 3.0)
    assert crowded == pytest.approx(np.mean([0.50, 0.50, 0.51]) + np.array([-0.2, 0.0, 0.2]))


def test_spread_labels_leaves_labels_alone_when_they_fit():
    assert spread_labels([0.2, 0.9, 0.5], 0.1, 0.0, 1.0) == pytest.approx([0.2, 0.9, 0.5])


def test_marker_sizes_draw_coinciding_points_as_rings():
    # inches: points 0 and 1 coincide, 2 touches them, 3 is far away
    sizes = marker_sizes(np.array([1.0, 1.0, 1.02, 3.0]), np.array([1.0, 1.0, 1.0, 2.0]))
    assert sizes[0] == sizes[3] and sizes[0] > sizes[1] > sizes[2] > 0


# ---------------------------------------------------------------- drawn figures


def _metrics(variants: list[tuple[str, float, float, float | None, bool]]) -> pl.DataFrame:
    """The metrics stage's aggregate rows for each (variant, nDCG@10, Jaccard, tau-PSI, degenerate)
    on two datasets (the figure shows their mean), in the metrics schema."""
    rows = []
    for name, ndcg, jac, tau, degenerate in variants:
        for ds, shift in (("x", -0.01), ("y", 0.01)):
            base = {"dataset": ds, "task": "rerank", "variant": name, "seed": None, "query_id": None}
            cells = [("first_stage", "ndcg@10", ndcg + shift),
                     ("random_shuffle", "jaccard", 1.0 if jac == 1 else jac + shift)]
            if tau is not None:
                cells.append(("random_shuffle", "tau_psi", tau + shift))
            if degenerate:
                cells.append(("random_shuffle", "warn_threshold_keeps_all", 1.0))
            rows += [{**base, "perturbation": p, "metric": m, "value": v} for p, m, v in cells]
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=SCHEMAS["metrics"]))


FOUR = [
    ("ots", 0.4061, 0.80, 0.61, False),
    ("capcal", 0.4062, 0.8001, 0.37, False),  # almost the same point as ots
    ("bm25", 0.96, 1.0, 0.0, False),  # Jaccard 1: at the top edge
    ("bsc", 0.82, 0.40, 0.50, True),  # degenerate Jaccard
]
ELEVEN = FOUR + [
    ("round_robin", 0.89, 0.57, 0.45, True), ("single_order", 0.75, 0.58, 0.55, False),
    ("order_averaged", 0.76, 0.04, 0.57, False), ("debias_first", 0.82, 0.135, 0.62, True),
    ("perm_aug", 0.767, 0.128, 0.60, False), ("oc_sft", 0.807, 0.268, 0.60, False),
    ("no_tau", 0.70, 0.30, None, False),
]
LABELS = {"ots": "Off the shelf", "capcal": "CapCal", "bm25": "First stage (identity)", "bsc": "BSC (x2)",
          "round_robin": "Round-robin", "single_order": "Single-order", "order_averaged": "Order-averaged",
          "debias_first": "DebiasFirst", "perm_aug": "Permutation augmentation", "oc_sft": "OC-SFT"}


def _example(n_docs: int, shuffles: int = 3) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One query whose scores follow the slot as much as the document: shuffles disagree."""
    rng = np.random.default_rng(7)
    quality = np.linspace(2.0, 0.0, n_docs)
    rows = []
    for m in range(shuffles):
        slots = rng.permutation(n_docs)
        for i in range(n_docs):
            rows.append({"query_id": "q1", "doc_id": f"d{i:03d}", "perturbation": "random_shuffle", "presentation": m,
                         "position": int(slots[i]), "score": float(quality[i] - 0.08 * slots[i] + rng.normal(0, .05))})
    grades = [3 if i < 2 else 2 if i < 4 else 1 if i < 7 else 0 for i in range(n_docs)]
    qrels = pl.DataFrame({"query_id": ["q1"] * n_docs, "doc_id": [f"d{i:03d}" for i in range(n_docs)],
                          "relevance": grades}, schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    return pl.DataFrame(rows), qrels


def _drawn(variants, n_docs: int):
    scores, qrels = _example(n_docs)
    threshold = float(np.quantile(scores["score"].to_numpy(), 0.7))
    ex = pick_example(scores, qrels, threshold)
    grades = dict(zip(qrels["doc_id"].to_list(), qrels["relevance"].to_list()))
    return draw_figure1(_metrics(variants), ex, grades, labels=LABELS)


def _drawn_texts(fig, monkeypatch) -> list[tuple[str, object]]:
    """(text, window extent) of every visible, non-empty text the canvas drew: of the texts
    fig.findobj finds, those whose draw ran (an axis keeps tick labels it does not draw)."""
    drawn: set[int] = set()
    draw = matplotlib.text.Text.draw

    def spy(self, renderer):
        drawn.add(id(self))
        return draw(self, renderer)

    monkeypatch.setattr(matplotlib.text.Text, "draw", spy)
    fig.canvas.draw()
    monkeypatch.undo()
    renderer = fig.canvas.get_renderer()
    # Text's own extent: an Annotation's would add its leader line, which is no text
    extent = matplotlib.text.Text.get_window_extent
    return [(t.get_text(), extent(t, renderer)) for t in fig.findobj(matplotlib.text.Text)
            if id(t) in drawn and t.get_visible() and t.get_text().strip()]


def _axes(fig, label: str):
    (ax,) = [a for a in fig.axes if a.get_label() == label]
    return ax


def _check_layout(fig, monkeypatch, variants: int) -> list[tuple[str, object]]:
    texts = _drawn_texts(fig, monkeypatch)
    width, height = fig.canvas.get_width_height()
    outside = [t for t, e in texts if e.x0 < 0 or e.y0 < 0 or e.x1 > width or e.y1 > height]
    assert not outside, f"texts past the canvas edge: {outside}"
    overlapping = [(a, b) for i, (a, ea) in enumerate(texts) for b, eb in texts[i + 1:]
                   if min(ea.x1, eb.x1) > max(ea.x0, eb.x0) and min(ea.y1, eb.y1) > max(ea.y0, eb.y0)]
    assert not overlapping, f"overlapping texts: {overlapping}"
    ax_b, ax_c = _axes(fig, "panel-b"), _axes(fig, "panel-c")
    for lo, hi in (ax_b.get_xlim(), ax_b.get_ylim(), ax_c.get_xlim()):
        assert 0.0 <= lo < hi <= 1.0
    # every point is drawn, and no text or legend covers its centre
    centres = np.concatenate([c.get_offset_transform().transform(c.get_offsets()) for c in ax_b.collections])
    assert len(centres) == variants
    # a point drawn on an earlier one is smaller than it: coinciding points show as rings
    sizes = [c.get_sizes()[0] for c in ax_b.collections]
    for i in range(len(centres)):
        for j in range(i):
            if np.hypot(*(centres[i] - centres[j])) < 1.0:
                assert sizes[i] < sizes[j], (i, j, sizes)
    covers = [e for _, e in texts] + [ax_b.get_legend().get_window_extent()]
    hidden = [tuple(p) for p in centres for e in covers if e.x0 <= p[0] <= e.x1 and e.y0 <= p[1] <= e.y1]
    assert not hidden, f"points under a text or the legend: {hidden}"
    return texts


@pytest.mark.parametrize(("variants", "n_docs"), [(FOUR, 8), (ELEVEN, 40)])
def test_figure1_texts_inside_the_canvas_and_apart(variants, n_docs, monkeypatch):
    fig = _drawn(variants, n_docs)
    texts = [t for t, _ in _check_layout(fig, monkeypatch, len(variants))]
    # the labels are Table 1's, without a suffix; degenerate variants are explained once, in the legend
    assert "BSC (x2)" in texts and not any("(degenerate)" in t for t in texts)
    assert texts.count("hollow: Jaccard degenerate (see table1.md)") == 1
    # panel (c): one bar per variant with a tau-PSI, and its value beside it
    ax_c = _axes(fig, "panel-c")
    with_tau = [v for v in variants if v[3] is not None]
    assert len(ax_c.patches) == len(with_tau)
    assert f"{np.mean([0.61 - 0.01, 0.61 + 0.01]):.3f}" in texts
    assert [t.get_text() for t in ax_c.get_yticklabels()][:1] == ["First stage (identity)"]  # highest Jaccard on top


def test_figure1_without_an_example_keeps_its_texts_inside_and_apart(monkeypatch):
    """No query qualified: panel (a) is words, and the figure still lays out cleanly."""
    texts = [t for t, _ in _check_layout(draw_figure1(_metrics(FOUR), None, {}, labels=LABELS), monkeypatch, 4)]
    assert "(a) No example query" in texts


def test_figure1_of_the_default_run(monkeypatch):
    """The figure of a finished default run (the config's figure1 example), when one is present:
    its results directory is PRESDEP_RESULTS_DIR or the repository's results/."""
    results = Path(os.environ.get("PRESDEP_RESULTS_DIR") or REPO / "results")
    config = yaml.safe_load((REPO / "workflow_config.yaml").read_text())
    run, dataset = config["figure1"]["variant"], config["figure1"]["dataset"]
    metrics = sorted(results.glob("metrics/**/*.parquet"))
    scores = results / "scores" / run / f"{dataset}.parquet"
    if not metrics or not scores.exists():
        pytest.skip(f"no finished default run in {results}")
    got = read_figure1_inputs(metrics, scores, results / dataset / "qrels.parquet",
                              results / "thresholds" / run / f"{dataset}.json",
                              example_metrics_path=results / "metrics" / run / f"{dataset}.parquet",
                              variant=run, dataset=dataset)
    ex, grades = chosen_example(got.example_scores, got.example_qrels, got.stored)
    labels = {name: v["label"] for name, v in config["variants"].items()}
    fig = draw_figure1(got.metrics, ex, grades, task=got.task, labels=labels, bsc=got.bsc)
    shown = got.metrics.filter((pl.col("task") == got.task) & (pl.col("metric") == "jaccard")
                               & pl.col("query_id").is_null())["variant"].n_unique()
    _check_layout(fig, monkeypatch, shown)
    assert ex is None or (ex.jaccard < 1 and abs(ex.ndcg_a - ex.ndcg_b) <= NEAR_EQUAL_NDCG)
