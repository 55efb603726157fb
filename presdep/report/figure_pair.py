"""Figure 1, panel (a): one query's candidates in two decision presentations, side by side.

Each column is one presentation's output ranking (score descending, ties by presented
position: :func:`presdep.metrics.quality.presented_order`, the order every metric reads).
A box is one document, labelled ``slot n · s``: ``n`` is where the document was presented in
that shuffle's list, 1-based, across its prompts when B is smaller than the pool (the
presentation's ``position`` value, which counts from 0, plus one; for a BSC ensemble, whose mean score was shown at no one slot, ``position`` is the
document's first-stage rank and the box says ``first-stage n`` instead), and ``s`` is its
score. The box colour is the document's qrels grade; retained documents (score >= t*) are
solid, the others faded and hatched; a dashed line marks the cut. Documents retained in only
one of the two presentations are outlined in red and joined by red lines. The title gives
both nDCG@k, the two rankings' Kendall tau (:func:`pair_kendall_tau`) and their Jaccard.

The figure's title says equal ranking quality, different decisions: :func:`draw_pair` draws only
a pair that shows it (:func:`shows_the_claim`: nDCG@k within :data:`NEAR_EQUAL_NDCG`, different
retained sets) and says so with the tolerance; where no query has such a pair,
:func:`draw_no_pair` says that in words instead.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from presdep.contracts.errors import InvalidInput
from presdep.metrics.instability import tau_psi
from presdep.metrics.quality import presented_order, presented_ranks
from presdep.metrics.rerank_rows import RETENTION_HIGH, RETENTION_LOW
from presdep.report.figure_layout import LABEL, SMALL, TITLE

# Two presentations' nDCG@k count as nearly equal within this absolute difference. Why 0.02: it
# is about the smallest step one query's nDCG@10 takes when a judged document moves one rank near
# the top, so within it the two rankings are as good as each other; a wider tolerance lets through
# pairs a reader sees as unequal at the three decimals the panel prints (0.05 did).
NEAR_EQUAL_NDCG = 0.02

_GRADE_COLOURS = ("#d9d9d9", "#9ecae1", "#4292c6", "#08519c")
_FLIP = "#d62728"
_EDGE = "#737373"
_HATCH = "#a6a6a6"
_FADE = 0.65  # share of white mixed into a not-retained box's grade colour
_EQUAL = 1e-9
_BOX_WIDTH = 0.78  # of the 1.0 between the two columns' centres


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
    positions_a: np.ndarray  # presented position of each doc (0 = shown first), aligned with doc_ids
    positions_b: np.ndarray
    kept_a: np.ndarray  # (n,) retained at t*, aligned with doc_ids
    kept_b: np.ndarray
    t_star: float
    presentations: int  # the query's presentations M
    query_jaccard: float | None = None  # the metrics file's: mean over all M(M-1)/2 pairs


def near_equal(ndcg_a: float, ndcg_b: float) -> bool:
    """The two nDCG@k differ by at most NEAR_EQUAL_NDCG (1e-9 of float noise allowed); NaN: no."""
    return abs(ndcg_a - ndcg_b) <= NEAR_EQUAL_NDCG + _EQUAL


def shows_the_claim(ndcg_a: float, ndcg_b: float, jaccard: float) -> bool:
    """A pair is Figure 1's example only when its words are true: nearly equal nDCG@k
    (:func:`near_equal`) and different retained sets (Jaccard < 1)."""
    return near_equal(ndcg_a, ndcg_b) and jaccard < 1.0


def no_example_text(k: int, unit: str = "shuffle") -> str:
    """What panel (a) says when no query has a pair that :func:`shows_the_claim`."""
    return (f"No test-half query here has two {unit}s within {NEAR_EQUAL_NDCG:g} nDCG@{k} of each other "
            f"that keep different documents at t*, so no example is shown.")


def pair_kendall_tau(ex: ExamplePair) -> float:
    """Kendall tau-a between the two presentations' strict rankings (ties by presented
    position), through the metrics stage's tau-PSI: tau-PSI = (1 - tau) / 2 for one pair."""
    strict = np.stack([presented_ranks(ex.scores_a, ex.positions_a), presented_ranks(ex.scores_b, ex.positions_b)])
    return 1.0 - 2.0 * float(tau_psi(strict))


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


def pair_rows(ex: ExamplePair, k: int, max_ranks: int) -> tuple[list[int], dict[int, int], list[int], int]:
    """(shown ranks, display row of each shown rank, gap rows, rows in all): one row per shown
    rank and an empty row wherever ranks are skipped."""
    n = len(ex.doc_ids)
    ranks = shown_ranks(n, k, (int(ex.kept_a.sum()), int(ex.kept_b.sum())), max_ranks)
    row_of, gaps, y = {}, [], 0
    for i, r in enumerate(ranks):
        if i and r != ranks[i - 1] + 1:
            gaps.append(y)
            y += 1
        row_of[r] = y
        y += 1
    if ranks[-1] < n - 1:
        gaps.append(y)
        y += 1
    return ranks, row_of, gaps, y


def _jaccard_text(ex: ExamplePair, unit: str = "shuffle") -> str:
    """The pair's Jaccard and the metrics file's for the query (mean over all its pairs);
    with two shuffles the pair is every pair, and the stored value is shown."""
    if ex.query_jaccard is None:
        return f"{ex.jaccard:.2f}"
    if ex.presentations == 2:
        return f"{ex.query_jaccard:.2f}"
    return f"{ex.jaccard:.2f} (mean over all {ex.presentations} {unit}s: {ex.query_jaccard:.2f})"


def _faded(colour: str) -> tuple[float, float, float]:
    return tuple(c + (1.0 - c) * _FADE for c in to_rgb(colour))


def _box(ax, x: float, y: float, height: float, colour: str, keep: bool, flip: bool) -> None:
    left, bottom = x - _BOX_WIDTH / 2, y - height / 2
    if keep:
        ax.add_patch(Rectangle((left, bottom), _BOX_WIDTH, height, facecolor=colour, linewidth=0, zorder=2))
    else:
        ax.add_patch(Rectangle((left, bottom), _BOX_WIDTH, height, facecolor=_faded(colour), edgecolor=_HATCH,
                               hatch="///", linewidth=0, zorder=2))
    ax.add_patch(Rectangle((left, bottom), _BOX_WIDTH, height, fill=False, zorder=3,
                           edgecolor=_FLIP if flip else _EDGE, linewidth=2.4 if flip else 0.7))


def draw_pair(ax, ex: ExamplePair, grades: dict[str, int], max_ranks: int, k: int, bsc: bool = False) -> None:
    """Panel (a) on ``ax`` (module doc). ``bsc``: the presentations are BSC ensembles, whose
    positions are first-stage ranks."""
    slot_name, unit = ("first-stage", "ensemble") if bsc else ("slot", "shuffle")
    if not shows_the_claim(ex.ndcg_a, ex.ndcg_b, ex.jaccard):
        raise InvalidInput(f"figure 1: query {ex.query_id}, {unit}s {ex.a} and {ex.b} (nDCG@{k} {ex.ndcg_a:.3f} and "
                           f"{ex.ndcg_b:.3f}, Jaccard {ex.jaccard:.2f}) are no example of equal quality and different "
                           f"decisions: expected nDCG@{k} within {NEAR_EQUAL_NDCG:g} and Jaccard below 1")
    n = len(ex.doc_ids)
    columns = []
    for s, pos in ((ex.scores_a, ex.positions_a), (ex.scores_b, ex.positions_b)):
        order = presented_order(s, pos)
        columns.append(([ex.doc_ids[i] for i in order], s[order], np.asarray(pos)[order]))
    kept = [{d for d, keep in zip(ex.doc_ids, mask) if keep} for mask in (ex.kept_a, ex.kept_b)]
    flips = kept[0] ^ kept[1]
    cuts = (len(kept[0]), len(kept[1]))  # retained sets are rank prefixes
    ranks, row_of, gaps, rows = pair_rows(ex, k, max_ranks)
    xs, height = (0.0, 1.0), 0.8
    rank_of = [{d: r for r, d in enumerate(ids)} for ids, _, _ in columns]
    # Lines first, so boxes sit on top of them; only between docs drawn in both columns.
    for d, r0 in rank_of[0].items():
        r1 = rank_of[1][d]
        if r0 in row_of and r1 in row_of:
            flip = d in flips
            ax.plot([xs[0] + _BOX_WIDTH / 2, xs[1] - _BOX_WIDTH / 2], [row_of[r0], row_of[r1]],
                    color=_FLIP if flip else "#bdbdbd", lw=1.6 if flip else 0.7, zorder=1)
    for c, (ids, sc, pos) in enumerate(columns):
        for r in ranks:
            d = ids[r]
            keep = d in kept[c]
            g = max(0, min(3, grades.get(d, 0)))
            _box(ax, xs[c], row_of[r], height, _GRADE_COLOURS[g], keep, d in flips)
            other = rank_of[1 - c][d]
            note = "" if other in row_of else f" (rank {other + 1} there)"
            ax.text(xs[c], row_of[r], f"{slot_name} {int(pos[r]) + 1} · {sc[r]:.2f}{note}", ha="center",
                    va="center", fontsize=SMALL, zorder=4, color="white" if keep and g == 3 else "black")
        for gy in gaps:
            ax.text(xs[c], gy, "...", ha="center", va="center", fontsize=SMALL, color="#525252")
        cut = cuts[c]
        if 0 < cut < n and cut in row_of and cut - 1 in row_of:
            yc = (row_of[cut] + row_of[cut - 1]) / 2
            ax.plot([xs[c] - _BOX_WIDTH / 2 - 0.04, xs[c] + _BOX_WIDTH / 2 + 0.04], [yc, yc],
                    ls="--", color="black", lw=1.4, zorder=5)
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylim(rows - 0.4, -0.6)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{unit} {p}\nnDCG@{k} = {v:.3f}\n{cut} of {n} retained{_band(cut / n)}"
                        for p, v, cut in ((ex.a, ex.ndcg_a, cuts[0]), (ex.b, ex.ndcg_b, cuts[1]))], fontsize=SMALL)
    ax.xaxis.tick_top()
    ax.tick_params(axis="x", length=0)
    ax.set_yticks([row_of[r] for r in ranks])
    ax.set_yticklabels([str(r + 1) for r in ranks], fontsize=SMALL)
    ax.set_ylabel("rank in the scorer's output (1 = top)", fontsize=LABEL)
    for spine in ("right", "bottom", "top"):
        ax.spines[spine].set_visible(False)
    near = "equal" if abs(ex.ndcg_a - ex.ndcg_b) < _EQUAL else f"nearly equal (within {NEAR_EQUAL_NDCG:g})"
    ax.set_title(f"(a) Query {ex.query_id}: the same {n} candidates in two {unit}s\n"
                 f"nDCG@{k} {near}, Kendall τ = {pair_kendall_tau(ex):.2f}\n"
                 f"retained-set Jaccard = {_jaccard_text(ex, unit)}", fontsize=TITLE, pad=8)
    _legend(ax, ex, slot_name, unit)


def draw_no_pair(ax, k: int, bsc: bool = False) -> None:
    """Panel (a) when no query has a pair that :func:`shows_the_claim`: the reason, in words."""
    unit = "ensemble" if bsc else "shuffle"
    ax.set_axis_off()
    ax.set_title("(a) No example query", fontsize=TITLE, pad=8)
    ax.text(0.5, 0.75, textwrap.fill(no_example_text(k, unit), width=52), ha="center", va="top",
            fontsize=LABEL, transform=ax.transAxes)


def _band(share: float) -> str:
    """A retained share outside the degenerate-decision bounds, said beside the count."""
    if share > RETENTION_HIGH:
        return f" (over {RETENTION_HIGH:.0%})"
    return f" (under {RETENTION_LOW:.0%})" if share < RETENTION_LOW else ""


def _legend(ax, ex: ExamplePair, slot_name: str, unit: str) -> None:
    grey = _GRADE_COLOURS[1]
    handles = [Patch(facecolor=c, edgecolor=_EDGE, linewidth=0.7, label=f"grade {g}")
               for g, c in enumerate(_GRADE_COLOURS)]
    handles += [
        Patch(facecolor=grey, edgecolor=_EDGE, linewidth=0.7, label="retained (solid)"),
        Patch(facecolor=_faded(grey), edgecolor=_HATCH, hatch="///", linewidth=0.7, label="not retained (faded)"),
        Patch(facecolor="white", edgecolor=_FLIP, linewidth=2.4, label=f"retained in only one {unit}"),
        Line2D([], [], ls="--", color="black", lw=1.4, label=f"t* = {ex.t_star:.3g} (score >= t* retained)"),
    ]
    where = (f"the document was presented n-th in that {unit}" if slot_name == "slot"
             else f"n is the document's {slot_name} rank")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=2, fontsize=SMALL,
              frameon=False, title=f"box '{slot_name} n · score': {where};\nbox colour: the document's qrels grade",
              title_fontsize=SMALL)
