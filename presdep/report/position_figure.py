"""The position profile figure: every run's slot profile side by side (docs/methods/position.md).

One panel per task; per run (Table 1 label, and the training seed where there is one) the
centred mean score at each slot with its 95% band, from the aggregate ``slot_centred_*``
rows of the metrics files, averaged over datasets. A flat line at 0 is a scorer whose scores
follow the document; a falling line is one whose scores follow the slot. Each run's legend
entry gives its slot share of the score variance (``var_share_slot``), its chance level and
the permutation test's p-value (Bonferroni over the run's datasets).

Slots are numbered for people from 1 (1 = shown first), as Table 1's slot flags and Figure 1
number them; the metrics' ``slot_centred_*_sNN`` names and :func:`profiles`' ``slot`` column
count from 0, and only the drawing adds 1.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path

import presdep.runtime.mplconfig  # noqa: F401 - before matplotlib: no font cache in the user's home

# isort: split
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_table
from presdep.contracts.tasks import TASKS
from presdep.report.figure_files import save_svg_png

PERTURBATION = "random_shuffle"
_MAX_TICKS = 10  # slot ticks on an axis; beyond this every step-th slot is labelled


def slot_ticks(slots: int) -> list[int]:
    """1-based slot numbers to label on an axis of ``slots`` slots: every slot up to
    _MAX_TICKS, else 1 and the multiples of a round step (2, 5, 10, 20, 50, ...)."""
    if slots <= _MAX_TICKS:
        return list(range(1, slots + 1))
    steps = (m * 10**e for e in itertools.count() for m in (2, 5, 10))
    step = next(s for s in steps if slots / s <= _MAX_TICKS)
    return [1] + list(range(step, slots + 1, step))


def profiles(metrics: pl.DataFrame, labels: Mapping[str, str] | None = None) -> pl.DataFrame:
    """task, run, label, slot, mean, ci95, slot_share: each run's centred slot profile (mean over datasets)."""
    agg = metrics.filter((pl.col("perturbation") == PERTURBATION) & pl.col("query_id").is_null()
                         & pl.col("value").is_not_null())
    parts = agg.filter(pl.col("metric").str.contains(r"^slot_centred_(mean|ci95)_s\d+$")).with_columns(
        pl.col("metric").str.extract(r"^slot_centred_(mean|ci95)_s\d+$", 1).alias("what"),
        pl.col("metric").str.extract(r"_s(\d+)$", 1).cast(pl.Int64).alias("slot"),
    )
    if parts.height == 0:
        return pl.DataFrame(schema={"task": pl.String, "run": pl.String, "label": pl.String, "slot": pl.Int64,
                                    "mean": pl.Float64, "ci95": pl.Float64, "slot_share": pl.Float64,
                                    "slot_chance": pl.Float64, "slot_p": pl.Float64})
    run = pl.col("variant") + pl.when(pl.col("seed").is_null()).then(pl.lit("")).otherwise(
        pl.lit("/seed") + pl.col("seed").cast(pl.String))
    wide = (parts.with_columns(run.alias("run"))
            .group_by("task", "run", "variant", "slot", "what").agg(pl.col("value").mean())
            .pivot(on="what", index=["task", "run", "variant", "slot"], values="value"))
    share = (agg.filter(pl.col("metric") == "var_share_slot").with_columns(run.alias("run"))
             .group_by("task", "run").agg(pl.col("value").mean().alias("slot_share")))
    # The permutation test of "no slot effect" per run, Bonferroni over its datasets (docs/methods/position.md).
    tested = agg.filter(pl.col("metric").is_in(["slot_p_value", "slot_share_chance"])).with_columns(run.alias("run"))
    test = (tested.group_by("task", "run").agg(
        (pl.col("value").filter(pl.col("metric") == "slot_p_value").min()
         * pl.col("value").filter(pl.col("metric") == "slot_p_value").len()).clip(upper_bound=1.0).alias("slot_p"),
        pl.col("value").filter(pl.col("metric") == "slot_share_chance").mean().alias("slot_chance")))
    share = share.join(test, on=["task", "run"], how="left")
    names = dict(labels or {})
    out = wide.join(share, on=["task", "run"], how="left").with_columns(
        pl.col("variant").replace_strict(names, default=pl.col("variant")).alias("label")
        + pl.col("run").str.extract(r"(/seed\d+)$", 1).fill_null(""))
    for col in ("mean", "ci95"):
        if col not in out.columns:
            out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    for col in ("slot_p", "slot_chance"):
        if col not in out.columns:
            out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    return out.select("task", "run", "label", "slot", "mean", "ci95", "slot_share", "slot_chance", "slot_p").sort(
        "task", "run", "slot")


def position_figure(profile: pl.DataFrame, out_svg: str | Path, out_png: str | Path) -> None:
    """Draw the profiles (one panel per task present) to SVG and PNG, byte-stable for equal input.
    Without any profile (no random shuffles were scored) the figure says so instead."""
    save_svg_png(draw_position_figure(profile), out_svg, out_png, salt="presdep-position-profile")


def draw_position_figure(profile: pl.DataFrame) -> Figure:
    """The figure of :func:`position_figure` on an Agg canvas, not saved; slots drawn 1-based."""
    tasks = [t for t in TASKS if t in set(profile["task"].to_list())]
    fig = Figure(figsize=(max(8.0, 5.6 * len(tasks)), 4.8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(1, len(tasks)), squeeze=False)[0]
    if not tasks:
        axes[0].text(0.5, 0.5, "no slot profile: the metrics hold no random-shuffle rows",
                     ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
    for ax, task in zip(axes, tasks):
        part = profile.filter(pl.col("task") == task)
        for (run,), g in part.group_by("run", maintain_order=True):
            g = g.sort("slot")
            x, y = [s + 1 for s in g["slot"].to_list()], g["mean"].to_list()  # 1 = shown first
            half = [0.0 if v is None else v for v in g["ci95"].to_list()]
            share, chance, p = g["slot_share"][0], g["slot_chance"][0], g["slot_p"][0]
            said = [] if share is None else [f"slot share {share:.2f}" + ("" if chance is None else f", chance {chance:.2f}")]
            said += [] if p is None else [f"p = {p:.2g}"]
            label = g["label"][0] + (f" ({'; '.join(said)})" if said else "")
            line = ax.plot(x, y, marker="o", markersize=3, linewidth=1.4, label=label)[0]
            ax.fill_between(x, [a - h for a, h in zip(y, half)], [a + h for a, h in zip(y, half)],
                            color=line.get_color(), alpha=0.15, linewidth=0)
        ax.axhline(0.0, color="#777777", linewidth=0.8, linestyle=":")
        ax.set_title(task)
        ax.set_xlabel("slot in the prompt (1 = shown first)")
        ax.set_ylabel("score minus the document's\nmean over shuffles")
        ax.set_xticks(slot_ticks(int(part["slot"].max()) + 1))
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("Position profile: does the score follow the document (flat) or the slot?", fontsize=11)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.85, bottom=0.13, wspace=0.3)
    return fig


def position_figure_from_files(metrics_paths: Iterable[str | Path], labels: Mapping[str, str],
                               out_svg: str | Path, out_png: str | Path) -> pl.DataFrame:
    """The workflow step: every metrics file -> the figure (runs named by their Table 1
    ``labels``, variant -> label); returns the profiles drawn."""
    frames = [read_table(p, "metrics") for p in metrics_paths]
    if not frames:
        raise InvalidInput("position profile: no metrics files given")
    prof = profiles(pl.concat(frames, how="vertical"), labels)
    position_figure(prof, out_svg, out_png)
    return prof


__all__ = ["draw_position_figure", "position_figure", "position_figure_from_files", "profiles", "slot_ticks"]
