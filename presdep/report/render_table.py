"""The render-perturbation table: per run, dataset and kind, how far the scorer moves when only the
prompt's surface changes (docs/methods/render-perturbations.md). Order's measures never appear here.

A run (one label) is one or more ``metrics`` frames of :func:`presdep.metrics.render.render_metrics`
(one per dataset); the table takes each metric's aggregate row (the mean over the queries where it is
defined; ``zeng_psi_corpus`` is a corpus value).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.render_variants import KINDS, LABEL_STYLES, SCALES, SEPARATORS, VARIANTS
from presdep.contracts.schemas import write_text_atomic
from presdep.report.pool_table import runs_by_label

# (metric, column heading) in the order the Markdown shows them.
COLUMNS = (
    ("tau_psi", "tau-PSI"),
    ("zeng_psi_corpus", "Zeng PSI"),
    ("ndcg10_shuffle_mean", "nDCG@10 mean"),
    ("ndcg10_shuffle_worst", "worst"),
    ("ndcg10_shuffle_best", "best"),
    ("ndcg10_variant_spread", "spread"),
    ("jaccard", "Jaccard"),
    ("set_flip", "set flip"),
)
VARIANT_METRICS = tuple(f"ndcg10_variant{v}" for v in range(VARIANTS))
TABLE_SCHEMA = {"label": pl.String, "dataset": pl.String, "perturbation": pl.String, "metric": pl.String,
                "value": pl.Float64}
VARIANT_NAMES = {
    "id_relabel": LABEL_STYLES,
    "separator": SEPARATORS,
    "rubric_paraphrase": ("rubric", "paraphrase 1", "paraphrase 2", "paraphrase 3", "paraphrase 4"),
    "scale": tuple(SCALES),
}


def render_table(runs: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """label, dataset, perturbation (the kind), metric, value: the aggregate rows of the table's metrics."""
    wanted = [m for m, _ in COLUMNS] + list(VARIANT_METRICS)
    frames = []
    for label, frame in runs.items():
        part = frame.filter(pl.col("perturbation").is_in(list(KINDS)) & pl.col("query_id").is_null()
                            & pl.col("metric").is_in(wanted))
        frames.append(part.select(pl.lit(label, pl.String).alias("label"), "dataset", "perturbation", "metric",
                                  "value"))
    if not frames:
        raise InvalidInput("render table: no runs given")
    out = pl.concat(frames).cast(TABLE_SCHEMA)  # type: ignore[arg-type]
    kind_order = pl.col("perturbation").replace_strict({k: i for i, k in enumerate(KINDS)}, return_dtype=pl.Int8)
    return out.sort("label", "dataset", kind_order, "metric", maintain_order=True)


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def to_markdown(table: pl.DataFrame) -> str:
    if table.height == 0:
        return ("# Render perturbations\n\nNo render-perturbation row: no run here scored the render variants "
                "(they read rows whose scorer reads the prompt's slots; docs/methods/render-perturbations.md).\n")
    values = {(r["label"], r["dataset"], r["perturbation"], r["metric"]): r["value"]
              for r in table.iter_rows(named=True)}
    keys = list(dict.fromkeys((r["label"], r["dataset"], r["perturbation"]) for r in table.iter_rows(named=True)))
    lines = [
        "# Render perturbations",
        "",
        "The order stays the first-stage order; only the prompt's surface changes (five variants per kind, "
        "variant 0 the canonical prompt). tau-PSI and Zeng PSI (each variant a bucket) are over the variants; "
        "nDCG@10 mean, worst and best per query over the variants, spread = best - worst; Jaccard and set flip "
        "are the retained sets at the run's frozen t* on the test queries. Method: "
        "docs/methods/render-perturbations.md.",
        "",
        "| row | dataset | perturbation | " + " | ".join(h for _, h in COLUMNS) + " |",
        "|---|---|---|" + "---|" * len(COLUMNS),
    ]
    for label, dataset, kind in keys:
        cells = [_cell(values.get((label, dataset, kind, m))) for m, _ in COLUMNS]
        lines.append(f"| {label} | {dataset} | {kind} | " + " | ".join(cells) + " |")
    lines += ["", "## nDCG@10 per variant", "",
              "| row | dataset | perturbation | " + " | ".join(f"variant {v}" for v in range(VARIANTS)) + " |",
              "|---|---|---|" + "---|" * VARIANTS]
    for label, dataset, kind in keys:
        cells = [_cell(values.get((label, dataset, kind, m))) for m in VARIANT_METRICS]
        lines.append(f"| {label} | {dataset} | {kind} | " + " | ".join(cells) + " |")
    lines += ["", "Variants: " + "; ".join(f"{k}: " + ", ".join(f"{v} {n}" for v, n in enumerate(VARIANT_NAMES[k]))
                                           for k in KINDS) + "."]
    return "\n".join(lines) + "\n"


def write_render_table(runs: Mapping[str, pl.DataFrame], *, csv: str | Path, markdown: str | Path) -> pl.DataFrame:
    """The table as CSV and Markdown; atomic writes."""
    table = render_table(runs)
    write_text_atomic(csv, table.write_csv(float_precision=6))
    write_text_atomic(markdown, to_markdown(table))
    return table


__all__ = ["COLUMNS", "TABLE_SCHEMA", "VARIANT_METRICS", "render_table", "runs_by_label", "to_markdown",
           "write_render_table"]
