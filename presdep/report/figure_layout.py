"""Figure 1's geometry: axis limits inside a metric's range, a label column that cannot
overlap, and where each panel sits on the canvas.

Everything here is a pure function of numbers (and, for text sizes, of the font), so the
placement is the same for the same inputs and can be checked without drawing:

* :func:`axis_limits`: at least ``min_span`` wide, centred on the data, padded, then shifted
  (never widened) to stay inside the metric's range ``[lo, hi]``.
* :func:`spread_labels`: label centres as close as possible (least squares) to where their
  points are, in the points' order, at least one label height apart and inside given bounds.
* :func:`plan_layout`: the panels' rectangles (in inches) for the number of rank rows of
  panel (a), the number of variants, and the widest variant label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

# Font sizes in points: nothing on the figure is smaller than SMALL.
SMALL = 9.0
LABEL = 10.0
TITLE = 11.5
SUPTITLE = 14.0
# A text line's height as a multiple of its font size, with room for descenders and a small gap.
LINE = 1.4
LABEL_GAP = 0.25  # inches between panel (b)'s right edge and its label column


def axis_limits(values: Sequence[float], lo: float = 0.0, hi: float = 1.0, min_span: float = 0.2,
                pad: float = 0.08) -> tuple[float, float]:
    """(low, high) of an axis showing ``values`` of a metric whose range is ``[lo, hi]``.

    The span is the data's range widened by ``pad`` of itself on each side, and at least
    ``min_span``, centred on the data; an interval reaching past ``lo`` or ``hi`` is shifted
    back inside. A span that does not fit in the range is the whole range. Values outside
    the range (or none finite) are clipped into it (or give the whole range)."""
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    v = np.clip(v[np.isfinite(v)], lo, hi)
    if v.size == 0:
        return float(lo), float(hi)
    a, b = float(v.min()), float(v.max())
    span = max((b - a) * (1.0 + 2.0 * pad), min_span)
    if span >= hi - lo:
        return float(lo), float(hi)
    low = (a + b) / 2.0 - span / 2.0
    low = min(max(low, lo), hi - span)
    return float(low), float(low + span)


def _isotonic(targets: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit (pool adjacent violators)."""
    means: list[float] = []
    sizes: list[int] = []
    for t in targets:
        means.append(float(t))
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            n = sizes[-2] + sizes[-1]
            means[-2] = (means[-2] * sizes[-2] + means[-1] * sizes[-1]) / n
            sizes[-2] = n
            means.pop()
            sizes.pop()
    return np.repeat(means, sizes)


def spread_labels(wanted: Sequence[float], height: float, low: float, high: float) -> np.ndarray:
    """Centres of labels, one per entry of ``wanted`` (same order back), such that labels
    sorted by their wanted centre keep that order, consecutive centres are at least ``height``
    apart, and every label ``[c - height/2, c + height/2]`` lies in ``[low, high]``; among
    such placements, the one closest to ``wanted`` in squared distance.

    With ``d_i`` sorted and ``q_i = c_i - i * height`` the constraints say q is non-decreasing
    within fixed bounds, so the answer is the isotonic fit of ``d_i - i * height``, clipped.
    Labels that cannot fit (``len * height > high - low``) are stacked from ``low`` at
    ``height`` apart (the caller sizes the column so that this does not happen)."""
    d = np.asarray(wanted, dtype=np.float64)
    n = d.size
    if n == 0:
        return d
    order = np.lexsort((np.arange(n), d))  # stable: equal wanted centres keep their given order
    steps = np.arange(n) * height
    first, last = low + height / 2.0, high - height / 2.0 - (n - 1) * height
    q = _isotonic(d[order] - steps)
    q = np.full(n, first) if last < first else np.clip(q, first, last)
    out = np.empty(n)
    out[order] = q + steps
    return out


def text_width_in(text: str, size: float) -> float:
    """Width in inches of one line of ``text`` at ``size`` points in the default font."""
    if not text:
        return 0.0
    width, _, _ = TextToPath().get_text_width_height_descent(text, FontProperties(size=size), ismath=False)
    return float(width) / 72.0


@dataclass(frozen=True)
class Layout:
    """Figure size and the panels' rectangles, (left, bottom, width, height) in inches."""

    width: float
    height: float
    pair: tuple[float, float, float, float]
    variants: tuple[float, float, float, float]
    tau: tuple[float, float, float, float]
    label_font: float  # the variant labels' font size (points)

    def fraction(self, rect: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        """A rectangle in figure fractions (what ``Figure.add_axes`` takes)."""
        x, y, w, h = rect
        return x / self.width, y / self.height, w / self.width, h / self.height


def line_in(size: float, lines: int = 1) -> float:
    """Height in inches of ``lines`` text lines at ``size`` points."""
    return lines * size * LINE / 72.0


def plan_layout(rank_rows: int, variants: int, label_width: float) -> Layout:
    """Where the panels go: (a) on the left at full height; (b) at the top right with its label
    column beside it, (c) below (b). Every margin is the height or width of the text it holds
    (titles, tick labels, axis labels, legends), so nothing reaches past the canvas.

    ``rank_rows``: rows of panel (a) (shown ranks and gaps); ``variants``: bars of panel (c);
    ``label_width``: inches of the widest variant label at :data:`SMALL` points."""
    # Panel (c): one bar per variant, a text line and a half apart.
    bar_pitch = line_in(SMALL) * 1.5
    tau_h = max(1.2, variants * bar_pitch + 0.2)
    # Panel (b): tall enough for its label column (one label height per variant, so spread_labels
    # never runs out of room) and at least 3 in.
    label_font = SMALL
    column = variants * line_in(label_font)
    var_h = max(3.0, column + 0.3)
    top = line_in(SUPTITLE) + 0.2  # the figure title's band
    var_top = line_in(TITLE, 2) + 0.15  # (b)'s title
    var_bottom = line_in(SMALL) + line_in(LABEL) + line_in(SMALL) + 0.45  # ticks, axis label, legend
    tau_top = line_in(TITLE) + 0.15
    tau_bottom = line_in(SMALL) + line_in(LABEL, 2) + 0.25
    right_h = var_top + var_h + var_bottom + tau_top + tau_h + tau_bottom
    # Panel (a): rows 1.25 lines of its box text apart (or more), its title and headers above, legend below.
    pair_top = line_in(TITLE, 3) + line_in(SMALL, 3) + 0.25
    pair_bottom = line_in(SMALL, 7) + 0.3  # the legend: a two-line title and four rows
    pair_h = max(rank_rows * line_in(SMALL) * 1.25, right_h - pair_top - pair_bottom)
    height = top + max(right_h, pair_top + pair_h + pair_bottom)
    # Widths: (a) 0.8 in for its rank axis; the right column starts after a gutter.
    pair = (0.8, height - top - pair_top - pair_h, 5.4, pair_h)
    right = pair[0] + pair[2] + 0.45
    var_left = right + line_in(LABEL, 2) + line_in(SMALL) * 2.2  # (b)'s two-line y label and its ticks
    var_w = 4.1
    width = var_left + var_w + LABEL_GAP + label_width + 0.25
    var_bottom_y = height - top - var_top - var_h
    variants_rect = (var_left, var_bottom_y, var_w, var_h)
    tau_left = right + label_width + 0.2
    tau_w = width - tau_left - 0.45  # room for a value written past a long bar's end
    tau_y = var_bottom_y - var_bottom - tau_top - tau_h
    return Layout(width, height, pair, variants_rect, (tau_left, tau_y, tau_w, tau_h), label_font)
