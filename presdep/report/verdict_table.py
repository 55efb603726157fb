"""The verdict table: how often a frozen claim verifier changes its verdict when only the order of
the candidates its scorer saw changed (docs/methods/verdict-flip.md).

One row per (Table 1 label, collection, perturbation): each verdict metric's mean over claims,
then over training seeds; the claims judged and the DISPUTED claims left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from presdep.config.records import Variant
from presdep.contracts.schemas import write_text_atomic
from presdep.metrics.verdicts import PER_CLAIM, TASK
from presdep.report.tables import load_metrics

COUNTS = ("verdict_claims", "verdict_excluded_disputed")
COLUMNS = {  # metric -> column of the table
    "verdict_claims": "claims", "verdict_excluded_disputed": "disputed_excluded",
    "verdict_flip": "verdict_flip", "verdict_canonical_accuracy": "canonical_accuracy",
    "verdict_mean_accuracy": "mean_accuracy", "verdict_invalid_rate": "invalid_rate",
    "verdict_evidence_in_topk": "evidence_in_topk", "verdict_evidence_slot_mean": "evidence_slot_mean",
    "verdict_evidence_slot_var": "evidence_slot_var",
}


def verdict_table(metrics: pl.DataFrame, variants: Mapping[str, Variant]) -> pl.DataFrame:
    """label, dataset, perturbation, seeds and one column per verdict metric (seed means)."""
    rows = metrics.filter((pl.col("task") == TASK) & pl.col("query_id").is_null()
                          & pl.col("metric").is_in(list(COLUMNS)))
    order = {name: i for i, name in enumerate(variants)}
    per = (rows.group_by("variant", "dataset", "perturbation", "metric")
           .agg(pl.col("value").drop_nulls().mean(), pl.col("seed").n_unique().alias("seeds")))
    wide = per.pivot(on="metric", index=["variant", "dataset", "perturbation", "seeds"], values="value")
    for metric in COLUMNS:
        if metric not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(metric))
    wide = wide.with_columns(
        pl.col("variant").replace_strict({n: v.label for n, v in variants.items()}).alias("label"),
        pl.col("variant").replace_strict(order, return_dtype=pl.Int64).alias("_order"),
        *(pl.col(m).cast(pl.Int64) for m in COUNTS),
    )
    return (wide.sort("_order", "dataset", "perturbation")
            .select("label", "dataset", "perturbation", "seeds", *COLUMNS)
            .rename(COLUMNS))


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def to_markdown(table: pl.DataFrame, k: int | None = None) -> str:
    shown = table.filter(pl.col("perturbation") == "random_shuffle")
    top = f"top {k}" if k else "top k"
    lines = [f"| row | collection | claims | verdict flip | canonical acc. | mean acc. | invalid | evidence in {top} "
             "| evidence slot mean | slot var |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in shown.iter_rows(named=True):
        lines.append(f"| {r['label']} | {r['dataset']} | {r['claims']} | {_cell(r['verdict_flip'])} | "
                     f"{_cell(r['canonical_accuracy'])} | {_cell(r['mean_accuracy'])} | {_cell(r['invalid_rate'])} | "
                     f"{_cell(r['evidence_in_topk'])} | {_cell(r['evidence_slot_mean'], 2)} | "
                     f"{_cell(r['evidence_slot_var'], 2)} |")
    excluded = sorted({(r["dataset"], r["disputed_excluded"]) for r in shown.iter_rows(named=True)})
    notes = ["", "Verdict flip = (M - modal verdict count) / M over the M shuffles of a claim (an invalid reply is "
             "its own verdict); accuracies against the gold verdict (canonical = shuffle 0); evidence = a judged "
             "relevant passage among the passages the reader saw, its slot 0-based. Means over claims, then seeds."]
    if excluded:
        notes.append("Claims with gold DISPUTED left out: " + "; ".join(f"{d}: {n}" for d, n in excluded) + ".")
    return "\n".join(lines) + "\n" + "\n".join(notes) + "\n"


def write_verdict_table(metrics_paths: Sequence[str | Path], variants: Mapping[str, Variant], out_csv: str | Path,
                        out_md: str | Path, k: int | None = None) -> pl.DataFrame:
    """The verdict table as CSV and Markdown (rule ``verdict_table``)."""
    table = verdict_table(load_metrics(metrics_paths), variants)
    write_text_atomic(out_csv, table.write_csv(float_precision=6))
    write_text_atomic(out_md, to_markdown(table, k))
    return table


__all__ = ["COLUMNS", "PER_CLAIM", "to_markdown", "verdict_table", "write_verdict_table"]
