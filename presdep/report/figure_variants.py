"""Figure 1, panels (b) and (c): every variant by ranking quality, decision stability and tau-PSI.

(b) nDCG@k against retained-set Jaccard, one point per variant. Both axes stay inside the
    metrics' range [0, 1] (:func:`presdep.report.figure_layout.axis_limits`); a point at an
    edge is drawn whole over it. Each point is named by its Table 1 label in a column right of
    the axes, labels in the points' vertical order, at least one label height apart
    (:func:`presdep.report.figure_layout.spread_labels`), each joined to its point by a thin
    line in the point's colour. A variant whose Jaccard is degenerate is drawn hollow; the
    legend below the axes says so.
(c) tau-PSI per variant as horizontal bars, top to bottom in (b)'s label order, in (b)'s
    colours, on [0, 1] with a dashed line at chance (unrelated rankings); lower is more stable.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import polars as pl
from matplotlib.lines import Line2D

from presdep.report.diagnosis import CHANCE_TAU_PSI
from presdep.report.figure_layout import LABEL, LABEL_GAP, SMALL, TITLE, axis_limits, line_in, spread_labels

DEGENERATE_NOTE = "hollow: Jaccard degenerate (see table1.md)"
_MARKER = 90  # points^2
_RING = 0.45  # area of a marker drawn on an earlier one, as a share of that one's


def variant_colours(n: int) -> list[tuple[float, float, float, float]]:
    """n colours, distinct up to 15: tab10, then the dark shades of tab20b."""
    tab10, tab20b = matplotlib.colormaps["tab10"], matplotlib.colormaps["tab20b"]
    return [tab10(i) if i < 10 else tab20b((4 * (i - 10)) % 20) for i in range(n)]


def marker_sizes(x_in: np.ndarray, y_in: np.ndarray) -> list[float]:
    """Marker areas (points^2) for points at (x_in, y_in) inches, drawn in this order: a point
    on top of earlier ones is drawn smaller by a step per earlier marker it touches, so
    coinciding points show as concentric rings instead of hiding each other."""
    sizes: list[float] = []
    for i in range(len(x_in)):
        size = float(_MARKER)
        for j in range(i):
            if np.hypot(x_in[i] - x_in[j], y_in[i] - y_in[j]) * 72.0 < np.sqrt(sizes[j]):
                size = min(size, sizes[j] * _RING)
        sizes.append(size)
    return sizes


def _size_in(ax) -> tuple[float, float]:
    box = ax.get_position()
    w, h = ax.figure.get_size_inches()
    return box.width * w, box.height * h


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes, fontsize=SMALL)
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)


def draw_variants(ax, points: pl.DataFrame, k: int, degenerate: frozenset[str], colours: Sequence,
                  label_font: float = SMALL) -> list[int]:
    """Panel (b) on ``ax`` (module doc); returns the points' row indices, top label first."""
    ax.set_title("(b) Variants: ranking quality vs decision stability\n"
                 "random shuffles; mean over datasets, then seeds", fontsize=TITLE)
    ax.set_xlabel(f"nDCG@{k} (higher = better ranking)", fontsize=LABEL)
    ax.set_ylabel("retained-set Jaccard between shuffles\n(higher = more stable decisions)", fontsize=LABEL)
    ax.tick_params(labelsize=SMALL)
    if points.height == 0:
        _empty(ax, "no aggregate random-shuffle rows")
        return []
    x, y = points["ndcg"].to_numpy(), points["jaccard"].to_numpy()
    (x0, x1), (y0, y1) = axis_limits(x), axis_limits(y)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.grid(True, lw=0.4, color="#e0e0e0", zorder=0)
    variants = points["variant"].to_list()
    labels = points["label"].to_list() if "label" in points.columns else variants
    flagged = [v in degenerate for v in variants]
    width, height = _size_in(ax)
    sizes = marker_sizes((x - x0) / (x1 - x0) * width, (y - y0) / (y1 - y0) * height)
    for xi, yi, colour, hollow, size in zip(x, y, colours, flagged, sizes):
        face = "white" if hollow else colour
        ax.scatter([xi], [yi], s=size, facecolors=[face], edgecolors=[colour], linewidths=1.8, zorder=5,
                   clip_on=False)
    centres = spread_labels((y - y0) / (y1 - y0) * height, line_in(label_font), 0.0, height)
    for xi, yi, c, name, colour in zip(x, y, centres, labels, colours):
        ax.annotate(name, (xi, yi), xycoords="data", xytext=(1.0 + LABEL_GAP / width, c / height),
                    textcoords="axes fraction", ha="left", va="center", fontsize=label_font, annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": colour, "lw": 0.8, "shrinkA": 2, "shrinkB": 5,
                                "relpos": (0.0, 0.5)}, zorder=3)
    handles = []
    if not all(flagged):
        handles.append(Line2D([], [], ls="none", marker="o", color="#525252", markersize=8, label="filled: Jaccard defined"))
    if any(flagged):
        handles.append(Line2D([], [], ls="none", marker="o", markerfacecolor="white", markeredgecolor="#525252",
                              markeredgewidth=1.8, markersize=8, label=DEGENERATE_NOTE))
    below = (line_in(SMALL) + line_in(LABEL) + 0.15) / height  # under the tick labels and the x label
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -below), ncol=len(handles),
              fontsize=SMALL, frameon=False, handletextpad=0.3, columnspacing=1.2)
    return [int(i) for i in np.lexsort((np.arange(len(centres)), -centres))]


def draw_tau(ax, points: pl.DataFrame, order: Sequence[int], colours: Sequence) -> None:
    """Panel (c) on ``ax`` (module doc): one bar per point of ``order``, top to bottom."""
    ax.set_title("(c) τ-PSI per variant (lower = more stable)", fontsize=TITLE)
    ax.set_xlabel(f"τ-PSI between shuffles (τ-a)\ndashed: chance, unrelated rankings ({CHANCE_TAU_PSI:g})",
                  fontsize=LABEL)
    ax.tick_params(labelsize=SMALL)
    ax.set_xlim(0.0, 1.0)
    if not order:
        _empty(ax, "no aggregate random-shuffle rows")
        return
    labels = points["label"].to_list() if "label" in points.columns else points["variant"].to_list()
    tau = points["tau_psi"].to_list()
    rows = np.arange(len(order))
    ax.set_ylim(len(order) - 0.4, -0.6)
    ax.set_yticks(rows)
    ax.set_yticklabels([labels[i] for i in order], fontsize=SMALL)
    ax.tick_params(axis="y", length=0)
    ax.grid(True, axis="x", lw=0.4, color="#e0e0e0", zorder=0)
    for row, i in zip(rows, order):
        v = tau[i]
        if v is None or not np.isfinite(v):
            ax.text(0.01, row, "no τ-PSI rows", va="center", ha="left", fontsize=SMALL, color="#525252")
            continue
        ax.barh([row], [v], height=0.62, color=[colours[i]], zorder=2)
        inside = v > 0.86  # a value past the bar's end would leave the axes
        # on a white ground: the chance line passes behind a value, never through it
        ax.text(v - 0.012 if inside else v + 0.012, row, f"{v:.3f}", va="center", ha="right" if inside else "left",
                fontsize=SMALL, color="white" if inside else "black", zorder=5,
                bbox=None if inside else {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"})
    ax.axvline(CHANCE_TAU_PSI, ls="--", color="black", lw=1.2, zorder=4)
    for spine in ("right", "top"):
        ax.spines[spine].set_visible(False)
