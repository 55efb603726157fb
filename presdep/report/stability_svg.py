"""SVG of one column's bootstrap: each variant's rank distribution and 95% rank interval, its
Rank(UB) and tier, the tiers drawn as alternating bands with a bracket each; the heading says
that the pairwise intervals behind them are unadjusted for multiplicity.

1200 x 630 pixels (figsize 12 x 6.3 at dpi 100); matplotlib writes sizes in points,
so the root element's width/height are rewritten to pixels (the viewBox keeps the
drawing's own units, so it scales exactly).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import presdep.runtime.mplconfig  # noqa: F401 - before matplotlib: no font cache in the user's home
from presdep.contracts.errors import InvalidInput

# isort: split
import matplotlib

matplotlib.use("Agg")  # never needs a display; must precede any pyplot import elsewhere

from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from presdep.contracts.schemas import write_text_atomic
from presdep.report.stability_tiers import level_label, unadjusted_clause

WIDTH_PX, HEIGHT_PX = 1200, 630
_DPI = 100
MAX_FOOTER_LINES = 5  # lines of 0.025 figure height fit under the axes (they start at 0.16)
_FOOTER_CHARS = 200  # about the figure's width at font size 8


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _draw_tiers(ax, result: Mapping[str, Any], variants: list[str]) -> None:
    """A shaded band for every other tier, a dashed line between tiers and a bracket per tier right of the axes."""
    level = level_label(result["tierLevel"])
    bracket = blended_transform_factory(ax.transAxes, ax.transData)  # x in axes units, y in rows
    row = {v: y for y, v in enumerate(variants)}
    for k, members in enumerate(result["tiers"], start=1):
        first, last = row[members[0]], row[members[-1]]
        if k % 2:
            ax.axhspan(first - 0.5, last + 0.5, color="#eef1f7", zorder=0,
                       label=f"tier (no pair separable at {level})" if k == 1 else None)
        if k > 1:
            ax.axhline(first - 0.5, color="#777777", linestyle="--", linewidth=1, zorder=1)
        ax.plot([1.008, 1.018, 1.018, 1.008], [first - 0.35, first - 0.35, last + 0.35, last + 0.35],
                transform=bracket, clip_on=False, color="#333333", linewidth=1.2)


def stability_figure(result: Mapping[str, Any], title: str | None = None,
                     labels: Mapping[str, str] | None = None) -> Figure:
    """The figure for one column's result dict (as returned by ``paired_bootstrap``); variants are
    shown by their Table 1 ``labels`` (variant -> label) where given."""
    variants = list(result["variants"])
    n = len(variants)
    fig = Figure(figsize=(WIDTH_PX / _DPI, HEIGHT_PX / _DPI), dpi=_DPI)
    FigureCanvasSVG(fig)
    ax = fig.add_axes((0.20, 0.16, 0.52, 0.68))
    # Heights relative to the largest probability in the plot, so flat distributions stay visible.
    top = max((p for v in variants for p in result["rankDistribution"][v].values()), default=1.0) or 1.0
    for y, v in enumerate(variants):
        dist = result["rankDistribution"][v]
        ranks = [float(r) for r in dist]
        probs = [dist[r] for r in dist]
        base = y + 0.38  # the y axis is inverted (best on top): negative heights grow upward
        ax.bar(ranks, [-0.75 * p / top for p in probs], width=0.8, bottom=base,
               color="#4c72b0", alpha=0.8, zorder=2, label="P(rank)" if y == 0 else None)
        lo, hi = result["rankInterval95"][v]
        ax.plot([lo, hi], [base, base], color="#c44e52", linewidth=3, zorder=3,
                solid_capstyle="butt", label="95% rank interval" if y == 0 else None)
        ax.plot([result["rank"][v]], [base], marker="D", color="black", markersize=6, zorder=4,
                label="full-sample rank" if y == 0 else None)
    _draw_tiers(ax, result, variants)
    ax.set_yticks(range(n))
    ax.set_yticklabels([(labels or {}).get(v, v) for v in variants])
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0.5, max(n, 1) + 0.5)
    ax.set_xticks(range(1, n + 1))
    ax.set_xlabel("rank (1 = best); bar height proportional to the bootstrap probability of that rank")
    ax.set_ylabel("variant")
    ax.grid(axis="x", color="#dddddd", zorder=0)
    fig.legend(loc="lower left", fontsize=9, frameon=False, bbox_to_anchor=(0.735, 0.0))

    # A side table with the numbers the bars summarise, and each row's Rank(UB) and tier.
    fig.text(0.74, 0.865, f"{'mean':>5} {'[95% interval]':^14} {'P(1st)':>6} {'UB':>3} {'tier':>4}",
             fontsize=9, weight="bold", family="monospace")
    for y, v in enumerate(variants):
        lo, hi = result["meanInterval95"][v]
        yy = ax.transData.transform((0, y))[1] / fig.bbox.height
        fig.text(0.74, yy, f"{_fmt(result['mean'][v]):>5} [{_fmt(lo):>5}, {_fmt(hi):>5}] "
                 f"{_fmt(result['probabilityFirst'][v]):>6} {result['rankUB'][v]:>3} {result['tier'][v]:>4}",
                 fontsize=9, va="center", family="monospace")

    column = result.get("column", "column")
    direction = result.get("direction")
    better = {"higher": "higher is better", "lower": "lower is better"}.get(direction, "")
    metric = result.get("metric")
    head = title or f"{column}: leaderboard stability"
    fig.suptitle(head, fontsize=15, weight="bold", y=0.975)
    sub = ", ".join(x for x in [
        f"metric {metric}" if metric else "", better,
        f"{result['resamples']} paired bootstrap resamples (seed {result['seed']})",
        f"{result['sharedItems']} shared items",
        f"mean Kendall tau-b {_fmt(result['meanKendallTau'])}",
    ] if x)
    fig.text(0.5, 0.905, sub, ha="center", fontsize=10)
    level = level_label(result["tierLevel"])
    fig.text(0.46, 0.878, f"{len(result['tiers'])} tier(s) at {level} (bands, brackets); "
             "UB = Rank(UB) = 1 + rows significantly better", ha="center", fontsize=9)
    # Short enough to end left of the side table's heading, which shares its height.
    fig.text(0.46, 0.855, f"Rank(UB), tiers: {unadjusted_clause(result['tierLevel'], n)}", ha="center", fontsize=8)
    for i, line in enumerate(_footer_lines(result)):
        fig.text(0.01, 0.012 + 0.025 * i, line, fontsize=8, color="#8b0000")
    return fig


def _footer_lines(result: Mapping[str, Any]) -> list[str]:
    """The lines under the plot, bottom up: the variants left out as degenerate (never drawn as
    ranked), then the warnings; at most MAX_FOOTER_LINES, the rest counted on the last one."""
    lines = [f"left out, degenerate cell (not ranked): {v}: {'; '.join(r)}"
             for v, r in (result.get("flagged") or {}).items()]
    lines += ["warning: " + w for w in result.get("warnings") or []]
    lines = [ln if len(ln) <= _FOOTER_CHARS else ln[:_FOOTER_CHARS - 3] + "..." for ln in lines]
    if len(lines) > MAX_FOOTER_LINES:
        lines = lines[:MAX_FOOTER_LINES - 1] + [f"... and {len(lines) - MAX_FOOTER_LINES + 1} more (see the JSON)"]
    return lines


def render_stability_svg(result: Mapping[str, Any], title: str | None = None,
                         labels: Mapping[str, str] | None = None) -> str:
    """The SVG text (1200 x 630 px) for one column's result dict."""
    fig = stability_figure(result, title, labels)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "presdep", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return _pixel_size(buf.getvalue())


def _pixel_size(svg: str) -> str:
    """Rewrite the root <svg> width/height (points) to pixels; keep the viewBox."""
    m = re.search(r"<svg\b[^>]*>", svg)
    if m is None:
        raise InvalidInput("matplotlib produced no <svg> root element")
    tag = m.group(0)
    new = re.sub(r'\bwidth="[^"]*"', f'width="{WIDTH_PX}px"', tag, count=1)
    new = re.sub(r'\bheight="[^"]*"', f'height="{HEIGHT_PX}px"', new, count=1)
    return svg[: m.start()] + new + svg[m.end():]


def write_stability_svg(result: Mapping[str, Any], path: str | os.PathLike, title: str | None = None,
                        labels: Mapping[str, str] | None = None) -> Path:
    return write_text_atomic(Path(path), render_stability_svg(result, title, labels))
