"""Figure 1: equal ranking quality, different decisions.

(a) One test-half query, the same candidates in two decision presentations
    (random shuffles; BSC ensembles for a BSC run) that keep different sets at t*
    with nDCG@10 as near equal as such pairs allow (the rule: :func:`pick_example`):
    each column lists the output ranking (ties by presented position), filled boxes
    are retained by the frozen threshold t*, red outlines mark docs retained in one
    presentation but not the other.
(b) Each variant as a point, named by its Table 1 label: nDCG@10 of the first-stage
    pass (the quality cell) against retained-set Jaccard between random shuffles
    (aggregate rows; mean over datasets within a seed, then over seeds). A variant whose
    Jaccard is degenerate (a flag of presdep.metrics.rerank_rows.DEGENERATE_FLAGS raised on
    any of its datasets) is drawn hollow and marked "degenerate".

Every number an earlier stage stored is read, not recomputed: t* and the test half
from the run's threshold artifact (checked against the ``t_star`` row of the run's
metrics file), the example query's Jaccard over all its shuffles from that metrics
file, panel (b) from the aggregate rows of every metrics file. What no file holds
(per-presentation nDCG@10, which docs two particular shuffles keep, and so their
pairwise Jaccard) is derived from the run's scores with the metrics stage's own
functions (presdep.metrics.quality, presdep.metrics.decisions).

matplotlib is driven through its object API with the Agg canvas (no pyplot, no
global backend switch); files are written atomically.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import presdep.runtime.mplconfig  # noqa: F401 - before matplotlib: no font cache in the user's home

# isort: split
import matplotlib
import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_table
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import decision_presentations
from presdep.metrics.compute import build_blocks
from presdep.metrics.decisions import pair_stats, retained
from presdep.metrics.quality import evaluate_presentations, presented_order, qrels_to_dict
from presdep.metrics.rerank_rows import raised_flags
from presdep.metrics.thresholds import read_thresholds
from presdep.report.figure_files import save_svg_png

PERTURBATION = "random_shuffle"
_EQUAL = 1e-9
_GRADE_COLOURS = ("#d9d9d9", "#9ecae1", "#4292c6", "#08519c")
_FLIP = "#d62728"


@dataclass
class ExamplePair:
    query_id: str
    a: int  # presentation ids
    b: int
    ndcg_a: float
    ndcg_b: float
    jaccard: float  # retained-set Jaccard of presentations a and b
    doc_ids: list[str]
    scores_a: np.ndarray
    scores_b: np.ndarray
    positions_a: np.ndarray
    positions_b: np.ndarray
    kept_a: np.ndarray  # (n,) retained at t*, aligned with doc_ids
    kept_b: np.ndarray
    t_star: float
    presentations: int  # the query's presentations M
    query_jaccard: float | None = None  # the metrics file's: mean over all M(M-1)/2 pairs


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
) -> ExamplePair:
    """The pair of random-shuffle presentations (over all queries) to show, by this rule, in order:

    1. the two presentations keep different sets at t* (Jaccard < 1): the figure shows
       different decisions;
    2. neither has nDCG@k 0 (a pair that ranks nothing relevant shows nothing about quality);
    3. the smallest nDCG@k difference (within 1e-9 counts as equal);
    4. the largest retained-set disagreement (smallest Jaccard).

    A pair failing 1 or 2 is chosen only when no query has a better one. Remaining ties:
    first query id, first pair. ``queries``: only these (the test half of the threshold split)."""
    if "perturbation" not in scores.columns:
        scores = scores.with_columns(pl.lit(PERTURBATION).alias("perturbation"))
    blocks = build_blocks(scores).get(PERTURBATION, [])
    blocks = [b for b in blocks if b.scores.shape[0] >= 2 and (queries is None or b.query_id in queries)]
    if not blocks:
        raise InvalidInput(f"figure 1 needs a query with two or more {PERTURBATION} presentations")
    if any(b.positions is None for b in blocks):
        raise InvalidInput("figure 1 needs the scores' 'position' column (ties are broken by presented position)")
    qd = qrels_to_dict(qrels)
    ndcg = evaluate_presentations([b.query_id for b in blocks], [b.doc_ids for b in blocks],
                                  [b.scores for b in blocks], [b.positions for b in blocks], qd,
                                  [f"ndcg@{k}"])[f"ndcg@{k}"]
    best_key, best = None, None
    for b in blocks:
        if b.query_id not in ndcg:
            continue
        kept = retained(b.scores, threshold)  # the metrics stage's retained sets
        for i, j in itertools.combinations(range(b.scores.shape[0]), 2):
            diff = abs(ndcg[b.query_id][i] - ndcg[b.query_id][j])
            jac, _ = pair_stats(kept[[i, j]])
            # smaller is better, item by item of the docstring's rule
            key = (jac >= 1.0, min(ndcg[b.query_id][i], ndcg[b.query_id][j]) == 0,
                   0.0 if diff < _EQUAL else diff, jac)
            if best_key is None or key < best_key:
                best_key = key
                best = ExamplePair(b.query_id, int(b.presentations[i]), int(b.presentations[j]),
                                   float(ndcg[b.query_id][i]), float(ndcg[b.query_id][j]), jac,
                                   list(b.doc_ids), b.scores[i].copy(), b.scores[j].copy(),
                                   b.positions[i].copy(), b.positions[j].copy(), kept[i].copy(),
                                   kept[j].copy(), float(threshold), int(b.scores.shape[0]))
    if best is None:
        raise InvalidInput("figure 1: no query of the example scores has qrels")
    return best


def variant_points(metrics: pl.DataFrame, task: str = "rerank", k: int = 10) -> pl.DataFrame:
    """variant, ndcg, jaccard: nDCG@k of the first-stage pass and Jaccard between random
    shuffles (aggregate rows), mean over datasets within a seed, then over seeds (Table 1's rule)."""
    ndcg_name = f"ndcg@{k}"
    m = metrics.filter(
        pl.col("query_id").is_null()
        & (
            ((pl.col("perturbation") == FIRST_STAGE) & (pl.col("metric") == ndcg_name))
            | ((pl.col("perturbation") == PERTURBATION) & (pl.col("metric") == "jaccard"))
        )
        & pl.col("value").is_not_null()
    )
    if "task" in m.columns:
        m = m.filter(pl.col("task") == task)
    if m.height == 0:
        return pl.DataFrame(schema={"variant": pl.String, "ndcg": pl.Float64, "jaccard": pl.Float64})
    m = m.with_columns(pl.col("seed").fill_null(-1))
    per_seed = m.group_by(["variant", "seed", "metric"]).agg(pl.col("value").mean())
    per_var = per_seed.group_by(["variant", "metric"]).agg(pl.col("value").mean())
    wide = per_var.pivot(on="metric", index="variant", values="value")
    for col in (ndcg_name, "jaccard"):
        if col not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    return (
        wide.select("variant", pl.col(ndcg_name).alias("ndcg"), "jaccard")
        .drop_nulls()
        .sort("variant")
    )


def shown_ranks(n: int, k: int, cuts: tuple[int, int], max_rows: int) -> list[int]:
    """0-based ranks to draw: the top k, then a window around both retention cuts (where
    retained sets differ), at most ``max_rows`` in all."""
    top = list(range(min(n, k)))
    for margin in (4, 2, 1, 0):
        lo, hi = max(0, min(cuts) - margin), min(n, max(cuts) + margin)
        ranks = sorted(set(top) | set(range(lo, hi)))
        if len(ranks) <= max_rows:
            return ranks
    return sorted(set(top) | set(range(lo, hi)))[:max_rows]


def _jaccard_text(ex: ExamplePair) -> str:
    """The pair's Jaccard and the metrics file's for the query (mean over all its pairs);
    with two shuffles the pair is every pair, and the stored value is shown."""
    if ex.query_jaccard is None:
        return f"{ex.jaccard:.2f}"
    if ex.presentations == 2:
        return f"{ex.query_jaccard:.2f}"
    return f"{ex.jaccard:.2f} (mean over all {ex.presentations} shuffles: {ex.query_jaccard:.2f})"


def _draw_pair(ax, ex: ExamplePair, grades: dict[str, int], max_ranks: int, k: int) -> None:
    n = len(ex.doc_ids)
    cols = []
    for s, pos in ((ex.scores_a, ex.positions_a), (ex.scores_b, ex.positions_b)):
        order = presented_order(s, pos)
        cols.append(([ex.doc_ids[i] for i in order], s[order]))
    kept = [{d for d, keep in zip(ex.doc_ids, mask) if keep} for mask in (ex.kept_a, ex.kept_b)]
    flips = kept[0] ^ kept[1]
    cuts = (len(kept[0]), len(kept[1]))  # retained sets are rank prefixes
    ranks = shown_ranks(n, k, cuts, max_ranks)
    # One display row per shown rank, plus an empty row wherever ranks are skipped.
    row_of, y = {}, 0
    gaps = []
    for i, r in enumerate(ranks):
        if i and r != ranks[i - 1] + 1:
            gaps.append(y)
            y += 1
        row_of[r] = y
        y += 1
    if ranks[-1] < n - 1:
        gaps.append(y)
        y += 1
    rows = y
    xs = (0.0, 1.0)
    width, height = 0.62, 0.8
    rank_of = [{d: r for r, d in enumerate(ids)} for ids, _ in cols]
    # Lines first, so boxes sit on top of them; only between docs drawn in both columns.
    for d, r0 in rank_of[0].items():
        r1 = rank_of[1][d]
        if r0 in row_of and r1 in row_of:
            flip = d in flips
            ax.plot([xs[0] + width / 2, xs[1] - width / 2], [row_of[r0], row_of[r1]],
                    color=_FLIP if flip else "#bdbdbd", lw=1.4 if flip else 0.6, zorder=1)
    for c, (ids, sc) in enumerate(cols):
        for r in ranks:
            d, v = ids[r], sc[r]
            keep = d in kept[c]
            g = max(0, min(3, grades.get(d, 0)))
            ax.add_patch(Rectangle(
                (xs[c] - width / 2, row_of[r] - height / 2), width, height,
                facecolor=_GRADE_COLOURS[g] if keep else "white",
                edgecolor=_FLIP if d in flips else "#737373",
                linewidth=2.2 if d in flips else 0.6, zorder=2,
            ))
            other = rank_of[1 - c][d]
            note = "" if other in row_of else f"; rank {other + 1} there"
            ax.text(xs[c], row_of[r], f"{d} ({v:.2f}{note})", ha="center", va="center", fontsize=6,
                    zorder=3, color="black" if keep and g < 3 else ("white" if keep else "#525252"))
        for gy in gaps:
            ax.text(xs[c], gy, "...", ha="center", va="center", fontsize=9, color="#525252")
        cut = cuts[c]
        if 0 < cut < n and cut in row_of and cut - 1 in row_of:
            yc = (row_of[cut] + row_of[cut - 1]) / 2
            ax.plot([xs[c] - width / 2 - 0.03, xs[c] + width / 2 + 0.03], [yc, yc],
                    ls="--", color="black", lw=1.2, zorder=4)
    ax.set_xlim(-0.35, 1.35)
    ax.set_ylim(rows - 0.2, -1.0)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"shuffle {ex.a}\nnDCG@{k} = {ex.ndcg_a:.3f}\n|S| = {cuts[0]} retained",
                        f"shuffle {ex.b}\nnDCG@{k} = {ex.ndcg_b:.3f}\n|S| = {cuts[1]} retained"], fontsize=8)
    ax.xaxis.tick_top()
    ticks = [r for r in ranks if r == 0 or (r + 1) % 5 == 0 or r in (cuts[0] - 1, cuts[1] - 1)]
    ax.set_yticks([row_of[r] for r in ticks])
    ax.set_yticklabels([str(r + 1) for r in ticks], fontsize=7)
    ax.set_ylabel("rank in the scorer's output (1 = top)")
    for spine in ("right", "bottom"):
        ax.spines[spine].set_visible(False)
    ax.set_title(
        f"(a) Query {ex.query_id}: the same {n} candidates in two shuffles\n"
        f"nDCG@{k} {'equal' if abs(ex.ndcg_a - ex.ndcg_b) < _EQUAL else 'nearly equal'}, "
        f"retained-set Jaccard = {_jaccard_text(ex)}",
        fontsize=10,
    )
    handles = [Patch(facecolor=c, edgecolor="#737373", label=f"retained, grade {g}")
               for g, c in enumerate(_GRADE_COLOURS)]
    handles += [
        Patch(facecolor="white", edgecolor="#737373", label="not retained"),
        Patch(facecolor="white", edgecolor=_FLIP, linewidth=2.2, label="retained in only one shuffle"),
        Line2D([], [], ls="--", color="black", label=f"threshold t* = {ex.t_star:.3g} (score >= t* kept)"),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=2, fontsize=7, frameon=False)


def _draw_variants(ax, points: pl.DataFrame, k: int, degenerate: frozenset[str] = frozenset()) -> None:
    ax.set_title("(b) Variants: ranking quality vs decision stability\n(random shuffles, mean over datasets)",
                 fontsize=10)
    ax.set_xlabel(f"nDCG@{k} (higher = better ranking)")
    ax.set_ylabel("retained-set Jaccard between shuffles\n(higher = more stable decisions)")
    if points.height == 0:
        ax.text(0.5, 0.5, "no aggregate random-shuffle rows", ha="center", va="center", transform=ax.transAxes)
        return
    x = points["ndcg"].to_numpy()
    y = points["jaccard"].to_numpy()
    colours = matplotlib.colormaps["tab10"]
    labels = points["label"].to_list() if "label" in points.columns else points["variant"].to_list()
    for i, (v, name, xi, yi) in enumerate(zip(points["variant"].to_list(), labels, x, y)):
        flagged = v in degenerate
        text = f"{name} (degenerate)" if flagged else name
        paint = ({"facecolors": "none", "edgecolors": colours(i % 10), "linewidths": 1.5} if flagged
                 else {"color": colours(i % 10)})
        ax.scatter([xi], [yi], s=45, zorder=3, label=text, **paint)
        ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(5, 4), fontsize=7)
    pad_x = max(0.01, 0.1 * (x.max() - x.min()))
    pad_y = max(0.02, 0.1 * (y.max() - y.min()))
    ax.set_xlim(x.min() - pad_x, x.max() + pad_x)
    ax.set_ylim(max(0.0, y.min() - pad_y), min(1.0, y.max() + pad_y) + (0.02 if y.max() >= 1 else 0))
    ax.grid(True, lw=0.4, color="#e0e0e0")
    ax.legend(fontsize=7, loc="best", title="variant", title_fontsize=7)


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
) -> ExamplePair:
    """Draw Figure 1 (see module doc) to ``out_svg`` and ``out_png``; returns the chosen example.

    ``example_scores``: decision presentations (query_id, doc_id, presentation, score,
    position; a perturbation column is optional). ``stored``: t* and the per-query
    Jaccard the example run's threshold and metrics stages wrote (:func:`stored_example`);
    the example is one of the queries with a stored Jaccard."""
    if not math.isfinite(stored.t_star):
        raise InvalidInput(f"threshold must be finite, got {stored.t_star}")
    ex = pick_example(example_scores, example_qrels, stored.t_star, k, set(stored.query_jaccard))
    ex = replace(ex, query_jaccard=stored.query_jaccard[ex.query_id])
    grades = qrels_to_dict(example_qrels).get(ex.query_id, {})
    fig = Figure(figsize=(12, 8.5))
    FigureCanvasAgg(fig)
    ax_a, ax_b = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    _draw_pair(ax_a, ex, grades, max_ranks, k)
    points = variant_points(metrics, task, k).with_columns(
        pl.col("variant").replace_strict(dict(labels or {}), default=pl.col("variant")).alias("label"))
    degenerate = frozenset(raised_flags(metrics).filter(pl.col("task") == task)["variant"].to_list())
    _draw_variants(ax_b, points, k, degenerate)
    fig.suptitle("Equal ranking quality does not mean equal decisions", fontsize=12)
    fig.subplots_adjust(left=0.08, right=0.97, top=0.86, bottom=0.12, wspace=0.3)
    save_svg_png(fig, out_svg, out_png, salt="presdep-figure1")
    return ex


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
) -> ExamplePair:
    """The workflow's entry point. ``variant`` is a scoring run key (``off_the_shelf`` or a
    trained run such as ``oc_sft/seed42``); its example comes from that run's scores file
    (``scores_path``), among the test-half queries, at the t* of that run's threshold
    artifact (``thresholds_path``), with its Jaccard from that run's metrics file
    (``example_metrics_path``). The variant points come from every metrics file (which
    store the variant name), shown by their Table 1 ``labels`` (variant -> label)."""
    thr = read_thresholds(thresholds_path)
    metrics = pl.concat([read_table(p, "metrics") for p in metrics_paths], how="vertical")
    example = read_table(example_metrics_path, "metrics").filter(pl.col("dataset") == dataset)
    if example.height == 0:
        raise InvalidInput(f"figure 1 ({variant}): no metrics rows for dataset {dataset!r} in {example_metrics_path}")
    task = example["task"][0]
    if task != "rerank":
        raise InvalidInput(f"figure 1 needs a reranking dataset (a retained-set threshold); {dataset!r} is {task!r}")
    stored = stored_example(example, thr, where=f"figure 1 ({variant}, {dataset})")
    view = decision_presentations(
        read_table(scores_path, "scores"), bsc_k=int(thr.get("bsc_k") or 1), ensembles=int(thr.get("bsc_ensembles") or 4)
    )
    return figure1(metrics, view, read_table(qrels_path, "qrels"), stored, Path(out_svg), Path(out_png), task=task,
                   labels=labels)
