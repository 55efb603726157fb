"""Figure 1: equal ranking quality, different decisions.

(a) One test-half query, the same candidates in two decision presentations (random
    shuffles; BSC ensembles for a BSC run) whose nDCG@10 differ by at most
    :data:`NEAR_EQUAL_NDCG` and which keep different sets at t*, chosen by
    :func:`pick_example`'s rule (below). Each column lists the output ranking (ties by
    presented position); a box reads ``slot n · score``, ``n`` the 1-based slot the document
    had in that shuffle's prompt (its ``position`` + 1; positions count from 0), its colour the
    qrels grade; retained boxes are solid, the others faded, a dashed line is t*, and red marks
    the documents retained in one shuffle only. The title says the two nDCG@10 are equal or
    nearly equal (with the tolerance) and gives the two rankings' Kendall tau-a (through
    presdep.metrics.instability's tau-PSI, as the metrics stage computes it) and Jaccard
    (presdep.report.figure_pair). Where no query has such a pair, the panel says so in words
    and the figure is still written.
(b) Each variant as a point, named by its Table 1 label: nDCG@10 of the first-stage pass
    (the quality cell) against retained-set Jaccard between random shuffles; a variant whose
    Jaccard is degenerate (a flag of presdep.metrics.rerank_rows.DEGENERATE_FLAGS raised on
    any of its datasets) is drawn hollow. (c) Each variant's tau-PSI, the headline, as a bar
    against the chance level (presdep.report.figure_variants). Panels (b) and (c) read the
    aggregate rows; mean over datasets within a seed, then over seeds (Table 1's rule).

The example rule. Only a pair that shows the title qualifies: its two nDCG@k differ by at most
NEAR_EQUAL_NDCG and its retained sets differ (Jaccard < 1). Among those, smaller is better, item
by item: (i) either presentation keeps every candidate or none (the threshold decided nothing);
(ii) either keeps a share of the pool outside the degenerate-decision bounds; (iii) either
nDCG@k is 0; (iv) the smallest Jaccard (the most different decisions); (v) the smallest nDCG@k
difference; then the first query id (string order), then the first pair (a, b) of presentation
ids. Items i to iii come before the Jaccard because a presentation that keeps nothing has
Jaccard 0 with any other by arithmetic, not by a different decision.

Every number an earlier stage stored is read, not recomputed: t* and the test half
from the run's threshold artifact (checked against the ``t_star`` row of the run's
metrics file), the example query's Jaccard over all its shuffles from that metrics
file, panels (b) and (c) from the aggregate rows of every metrics file. What no file holds
(per-presentation nDCG@10, which docs two particular shuffles keep, and so their
pairwise Jaccard and Kendall tau) is derived from the run's scores with the metrics
stage's own functions (presdep.metrics.quality, presdep.metrics.decisions,
presdep.metrics.instability).

matplotlib is driven through its object API with the Agg canvas (no pyplot, no
global backend switch); files are written atomically. The panels' geometry (axis limits
inside [0, 1], a label column that cannot overlap, margins sized to their text) is
presdep.report.figure_layout's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import presdep.runtime.mplconfig  # noqa: F401 - before matplotlib: no font cache in the user's home

# isort: split
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_table
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import decision_presentations
from presdep.metrics.compute import build_blocks
from presdep.metrics.decisions import pair_stats, retained
from presdep.metrics.quality import evaluate_presentations, qrels_to_dict
from presdep.metrics.rerank_rows import RETENTION_HIGH, RETENTION_LOW, raised_flags
from presdep.metrics.thresholds import read_thresholds
from presdep.report.figure_files import save_svg_png
from presdep.report.figure_layout import SMALL, SUPTITLE, plan_layout, text_width_in
from presdep.report.figure_pair import (
    NEAR_EQUAL_NDCG,
    ExamplePair,
    draw_no_pair,
    draw_pair,
    pair_rows,
    shown_ranks,
    shows_the_claim,
)
from presdep.report.figure_variants import draw_tau, draw_variants, variant_colours

__all__ = [
    "NEAR_EQUAL_NDCG",
    "ExamplePair",
    "Figure1Inputs",
    "StoredExample",
    "chosen_example",
    "draw_figure1",
    "figure1",
    "figure1_from_files",
    "pick_example",
    "read_figure1_inputs",
    "shown_ranks",
    "stored_example",
    "variant_points",
]

PERTURBATION = "random_shuffle"
_EQUAL = 1e-9
TITLE = "Equal ranking quality does not mean equal decisions"


@dataclass(frozen=True)
class StoredExample:
    """What the thresholds and metrics stages wrote for the example run on its dataset."""

    t_star: float
    query_jaccard: dict[str, float]  # test-half queries with a defined Jaccard


def stored_example(example_metrics: pl.DataFrame, thresholds: Mapping[str, Any],
                   where: str = "figure 1") -> StoredExample:
    """t* and per-query Jaccard of one run's metrics rows on one dataset, checked against
    the threshold artifact they were computed from."""
    rows = example_metrics.filter((pl.col("task") == "rerank") & (pl.col("perturbation") == PERTURBATION))
    t_rows = rows.filter(pl.col("query_id").is_null() & (pl.col("metric") == "t_star"))["value"].drop_nulls()
    if t_rows.len() != 1:
        raise InvalidInput(f"{where}: the example run's metrics need one t_star row, found {t_rows.len()}")
    t_star = float(t_rows[0])
    if t_star != float(thresholds["t_star"]):
        raise InvalidInput(f"{where}: the metrics were computed at t* = {t_star!r}, the threshold artifact "
                           f"says {thresholds['t_star']!r}: re-run the metrics")
    per_query = rows.filter(pl.col("query_id").is_not_null() & (pl.col("metric") == "jaccard")
                            & pl.col("value").is_not_null())
    query_jaccard = dict(per_query.select("query_id", "value").iter_rows())
    test = frozenset(str(q) for q in thresholds["test_queries"])
    outside = sorted(set(query_jaccard) - test)
    if outside:
        raise InvalidInput(f"{where}: the metrics hold Jaccard for queries outside the artifact's test half "
                           f"({outside[:5]}): re-run the metrics")
    if not query_jaccard:
        raise InvalidInput(f"{where}: the example run's metrics hold no per-query {PERTURBATION} Jaccard")
    return StoredExample(t_star, query_jaccard)


def pick_example(
    scores: pl.DataFrame, qrels: pl.DataFrame, threshold: float, k: int = 10,
    queries: set[str] | None = None,
) -> ExamplePair | None:
    """The pair of random-shuffle presentations (over all queries) to show, or None when no
    pair qualifies. A pair qualifies when its two nDCG@k differ by at most
    :data:`NEAR_EQUAL_NDCG` and it keeps different sets at t* (Jaccard < 1): the figure's title
    is then true of it. Qualifying pairs get a key, smaller is better, compared item by item:

    i.   either presentation keeps every candidate or none (the threshold decided nothing),
         then either keeps a share of the pool outside [RETENTION_LOW, RETENTION_HIGH] (the
         bounds of the degenerate-decision flags: sets that keep 90% of a pool overlap by
         arithmetic);
    ii.  either nDCG@k is 0 (a pair that ranks nothing relevant shows nothing about quality);
    iii. the retained-set Jaccard (the most different decisions first);
    iv.  the nDCG@k difference (within 1e-9 counts as 0).

    Remaining ties: the first query id (string order), then the first pair (a, b) of
    presentation ids. ``queries``: only these (the test half of the threshold split)."""
    if "perturbation" not in scores.columns:
        scores = scores.with_columns(pl.lit(PERTURBATION).alias("perturbation"))
    blocks = build_blocks(scores).get(PERTURBATION, [])
    blocks = [b for b in blocks if b.scores.shape[0] >= 2 and (queries is None or b.query_id in queries)]
    if not blocks:
        raise InvalidInput(f"figure 1 needs a query with two or more {PERTURBATION} presentations")
    if any(b.positions is None for b in blocks):
        raise InvalidInput("figure 1 needs the scores' 'position' column (ties are broken by presented position)")
    blocks.sort(key=lambda b: b.query_id)  # "first query id" is the tie-break
    qd = qrels_to_dict(qrels)
    ndcg = evaluate_presentations([b.query_id for b in blocks], [b.doc_ids for b in blocks],
                                  [b.scores for b in blocks], [b.positions for b in blocks], qd,
                                  [f"ndcg@{k}"])[f"ndcg@{k}"]
    if not any(b.query_id in ndcg for b in blocks):
        raise InvalidInput("figure 1: no query of the example scores has qrels")
    best_key, best = None, None
    for b in blocks:
        if b.query_id not in ndcg:
            continue
        nd = ndcg[b.query_id]
        kept = retained(b.scores, threshold)  # the metrics stage's retained sets
        decides = kept.any(axis=1) & ~kept.all(axis=1)
        share = kept.mean(axis=1)
        in_band = (share >= RETENTION_LOW) & (share <= RETENTION_HIGH)
        for i, j in itertools.combinations(range(b.scores.shape[0]), 2):
            jac, _ = pair_stats(kept[[i, j]])
            if not shows_the_claim(nd[i], nd[j], jac):
                continue
            diff = abs(nd[i] - nd[j])
            key = (not (decides[i] and decides[j]), not (in_band[i] and in_band[j]),
                   min(nd[i], nd[j]) == 0, jac, 0.0 if diff < _EQUAL else diff)
            if best_key is None or key < best_key:  # strict: the first of equal keys stays
                best_key = key
                best = ExamplePair(b.query_id, int(b.presentations[i]), int(b.presentations[j]),
                                   float(nd[i]), float(nd[j]), jac,
                                   list(b.doc_ids), b.scores[i].copy(), b.scores[j].copy(),
                                   b.positions[i].copy(), b.positions[j].copy(), kept[i].copy(),
                                   kept[j].copy(), float(threshold), int(b.scores.shape[0]))
    return best


def variant_points(metrics: pl.DataFrame, task: str = "rerank", k: int = 10) -> pl.DataFrame:
    """variant, ndcg, jaccard, tau_psi: nDCG@k of the first-stage pass, Jaccard and tau-PSI
    between random shuffles (aggregate rows), each the mean over datasets within a seed, then
    over seeds (Table 1's rule). Variants without an nDCG or a Jaccard are left out; a
    variant without tau-PSI rows has a null tau_psi."""
    ndcg_name = f"ndcg@{k}"
    m = metrics.filter(
        pl.col("query_id").is_null()
        & (
            ((pl.col("perturbation") == FIRST_STAGE) & (pl.col("metric") == ndcg_name))
            | ((pl.col("perturbation") == PERTURBATION) & pl.col("metric").is_in(["jaccard", "tau_psi"]))
        )
        & pl.col("value").is_not_null()
    )
    if "task" in m.columns:
        m = m.filter(pl.col("task") == task)
    schema = {"variant": pl.String, "ndcg": pl.Float64, "jaccard": pl.Float64, "tau_psi": pl.Float64}
    if m.height == 0:
        return pl.DataFrame(schema=schema)
    m = m.with_columns(pl.col("seed").fill_null(-1))
    per_seed = m.group_by(["variant", "seed", "metric"]).agg(pl.col("value").mean())
    per_var = per_seed.group_by(["variant", "metric"]).agg(pl.col("value").mean())
    wide = per_var.pivot(on="metric", index="variant", values="value")
    for col in (ndcg_name, "jaccard", "tau_psi"):
        if col not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    return (
        wide.select("variant", pl.col(ndcg_name).alias("ndcg"), "jaccard", "tau_psi")
        .drop_nulls(["ndcg", "jaccard"])
        .cast(schema)
        .sort("variant")
    )


def draw_figure1(
    metrics: pl.DataFrame,
    example: ExamplePair | None,
    grades: Mapping[str, int],
    *,
    task: str = "rerank",
    k: int = 10,
    max_ranks: int = 30,
    labels: Mapping[str, str] | None = None,
    bsc: bool = False,
) -> Figure:
    """Figure 1 (module doc) for a chosen ``example`` as a Figure on an Agg canvas, not saved.
    ``example`` None: no query qualified, and panel (a) says so. ``grades``: the example query's
    qrels (doc -> grade); ``labels``: variant -> Table 1 label; ``bsc``: the example's
    presentations are BSC ensembles (their positions are first-stage ranks)."""
    points = variant_points(metrics, task, k).with_columns(
        pl.col("variant").replace_strict(dict(labels or {}), default=pl.col("variant")).alias("label"))
    degenerate = frozenset(raised_flags(metrics).filter(pl.col("task") == task)["variant"].to_list())
    widest = max([text_width_in(t, SMALL) for t in points["label"].to_list()] + [1.0])
    rank_rows = 0 if example is None else pair_rows(example, k, max_ranks)[3]
    layout = plan_layout(rank_rows, max(points.height, 1), widest)
    fig = Figure(figsize=(layout.width, layout.height))
    FigureCanvasAgg(fig)
    ax_a = fig.add_axes(layout.fraction(layout.pair), label="panel-a")
    ax_b = fig.add_axes(layout.fraction(layout.variants), label="panel-b")
    ax_c = fig.add_axes(layout.fraction(layout.tau), label="panel-c")
    if example is None:
        draw_no_pair(ax_a, k, bsc)
    else:
        draw_pair(ax_a, example, dict(grades), max_ranks, k, bsc)
    colours = variant_colours(points.height)
    order = draw_variants(ax_b, points, k, degenerate, colours, layout.label_font)
    draw_tau(ax_c, points, order, colours)
    fig.text(0.5, 1.0 - 0.15 / layout.height, TITLE, ha="center", va="top", fontsize=SUPTITLE, weight="bold")
    return fig


def figure1(
    metrics: pl.DataFrame,
    example_scores: pl.DataFrame,
    example_qrels: pl.DataFrame,
    stored: StoredExample,
    out_svg: Path,
    out_png: Path,
    *,
    task: str = "rerank",
    k: int = 10,
    max_ranks: int = 30,
    labels: Mapping[str, str] | None = None,
    bsc: bool = False,
) -> ExamplePair | None:
    """Draw Figure 1 (see module doc) to ``out_svg`` and ``out_png``; returns the chosen example
    (None: no query qualified, and the figure says so).

    ``example_scores``: decision presentations (query_id, doc_id, presentation, score,
    position; a perturbation column is optional). ``stored``: t* and the per-query
    Jaccard the example run's threshold and metrics stages wrote (:func:`stored_example`);
    the example is one of the queries with a stored Jaccard. ``bsc``: the presentations are BSC
    ensembles; a box then gives the document's first-stage rank, not a slot (an ensemble's mean
    score was shown at no one slot)."""
    ex, grades = chosen_example(example_scores, example_qrels, stored, k)
    fig = draw_figure1(metrics, ex, grades, task=task, k=k, max_ranks=max_ranks, labels=labels, bsc=bsc)
    save_svg_png(fig, out_svg, out_png, salt="presdep-figure1")
    return ex


def chosen_example(example_scores: pl.DataFrame, example_qrels: pl.DataFrame, stored: StoredExample,
                   k: int = 10) -> tuple[ExamplePair | None, dict[str, int]]:
    """The example :func:`pick_example` chooses among the stored queries, with the stored
    Jaccard of its query, and that query's grades (doc -> grade); (None, {}) when no query
    qualifies."""
    if not math.isfinite(stored.t_star):
        raise InvalidInput(f"threshold must be finite, got {stored.t_star}")
    ex = pick_example(example_scores, example_qrels, stored.t_star, k, set(stored.query_jaccard))
    if ex is None:
        return None, {}
    ex = replace(ex, query_jaccard=stored.query_jaccard[ex.query_id])
    return ex, qrels_to_dict(example_qrels).get(ex.query_id, {})


@dataclass(frozen=True)
class Figure1Inputs:
    """What :func:`figure1` draws from, as read from a run's files."""

    metrics: pl.DataFrame
    example_scores: pl.DataFrame  # the example run's decision presentations
    example_qrels: pl.DataFrame
    stored: StoredExample
    task: str
    bsc: bool  # the example run's presentations are BSC ensembles


def read_figure1_inputs(
    metrics_paths: list[str | Path],
    scores_path: str | Path,
    qrels_path: str | Path,
    thresholds_path: str | Path,
    *,
    example_metrics_path: str | Path,
    variant: str,
    dataset: str,
) -> Figure1Inputs:
    """The files of :func:`figure1_from_files`, read and checked."""
    thr = read_thresholds(thresholds_path)
    metrics = pl.concat([read_table(p, "metrics") for p in metrics_paths], how="vertical")
    example = read_table(example_metrics_path, "metrics").filter(pl.col("dataset") == dataset)
    if example.height == 0:
        raise InvalidInput(f"figure 1 ({variant}): no metrics rows for dataset {dataset!r} in {example_metrics_path}")
    task = example["task"][0]
    if task != "rerank":
        raise InvalidInput(f"figure 1 needs a reranking dataset (a retained-set threshold); {dataset!r} is {task!r}")
    stored = stored_example(example, thr, where=f"figure 1 ({variant}, {dataset})")
    bsc_k = int(thr.get("bsc_k") or 1)
    view = decision_presentations(read_table(scores_path, "scores"), bsc_k=bsc_k,
                                  ensembles=int(thr.get("bsc_ensembles") or 4))
    return Figure1Inputs(metrics, view, read_table(qrels_path, "qrels"), stored, task, bsc_k > 1)


def figure1_from_files(
    metrics_paths: list[str | Path],
    scores_path: str | Path,
    qrels_path: str | Path,
    thresholds_path: str | Path,
    out_svg: str | Path,
    out_png: str | Path,
    *,
    example_metrics_path: str | Path,
    variant: str,
    dataset: str,
    labels: Mapping[str, str] | None = None,
) -> ExamplePair | None:
    """The workflow's entry point. ``variant`` is a scoring run key (``off_the_shelf`` or a
    trained run such as ``oc_sft/seed42``); its example comes from that run's scores file
    (``scores_path``), among the test-half queries, at the t* of that run's threshold
    artifact (``thresholds_path``), with its Jaccard from that run's metrics file
    (``example_metrics_path``). The variant points come from every metrics file (which
    store the variant name), shown by their Table 1 ``labels`` (variant -> label)."""
    got = read_figure1_inputs(metrics_paths, scores_path, qrels_path, thresholds_path,
                              example_metrics_path=example_metrics_path, variant=variant, dataset=dataset)
    return figure1(got.metrics, got.example_scores, got.example_qrels, got.stored, Path(out_svg), Path(out_png),
                   task=got.task, labels=labels, bsc=got.bsc)
