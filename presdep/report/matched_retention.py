"""Matched retention per trained row: the paper's form beside presdep's per-shuffle top-n form.

Each row (a Table 1 label) is averaged like a Table 1 cell: per dataset the aggregate row
(mean over the test queries where the value is defined), then the mean over datasets within a
training seed, then over seeds. The paper's form comes from the ``matched_retention_reference``
files (presdep.metrics.matched_reference); presdep's control from the metrics files'
``matched_jaccard`` and ``matched_set_flip`` (docs/methods/jaccard.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from presdep.config.records import Variant
from presdep.contracts.columns import Table1Column
from presdep.contracts.schemas import write_text_atomic
from presdep.contracts.views import RANDOM_SHUFFLE
from presdep.metrics.matched_reference import PERTURBATION
from presdep.report.tables import cell_values, load_metrics

log = logging.getLogger(__name__)

# column -> (perturbation, metric) of the rows it averages
COLUMNS = {
    "jaccard": (PERTURBATION, "jaccard"),
    "set_flip": (PERTURBATION, "set_flip"),
    "set_flip_zero": (PERTURBATION, "set_flip_zero"),
    "target_retention": (PERTURBATION, "target_retention"),
    "dev_retention": (PERTURBATION, "dev_retention"),
    "presdep_matched_jaccard": (RANDOM_SHUFFLE, "matched_jaccard"),
    "presdep_matched_set_flip": (RANDOM_SHUFFLE, "matched_set_flip"),
}


def _cell(rows: pl.DataFrame, perturbation: str, metric: str) -> pl.DataFrame:
    """label, value, datasets, seeds: Table 1's averaging (datasets within a seed, then seeds), by label."""
    spec = {metric: Table1Column("rerank", metric, perturbation, "higher")}
    got = cell_values(rows.drop("variant").rename({"label": "variant"}), spec)
    return got.select(pl.col("variant").alias("label"), "value", "datasets", "seeds")


def matched_table(reference: pl.DataFrame, metrics: pl.DataFrame, variants: Mapping[str, Variant]) -> pl.DataFrame:
    """One row per trained label with a reference file: both forms and the matching error."""
    labels = {n: v.label for n, v in variants.items()}
    trained = {n for n, v in variants.items() if v.student and not v.skip}
    both = pl.concat([reference, metrics.filter(pl.col("task") == "rerank")], how="vertical_relaxed").filter(
        pl.col("variant").is_in(list(trained))).with_columns(pl.col("variant").replace_strict(labels).alias("label"))
    order = list(dict.fromkeys(labels[n] for n in variants if n in trained))
    out = pl.DataFrame({"label": order}, schema={"label": pl.String})
    for column, (pert, metric) in COLUMNS.items():
        cell = _cell(both, pert, metric)
        if column == "jaccard":
            out = out.join(cell.rename({"value": column}), on="label", how="left")
        else:
            out = out.join(cell.select("label", pl.col("value").alias(column)), on="label", how="left")
    out = out.filter(pl.col("target_retention").is_not_null())
    return out.with_columns((pl.col("dev_retention") - pl.col("target_retention")).abs().alias("retention_gap"))


def _f(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4f}"


def to_markdown(table: pl.DataFrame) -> str:
    if table.height == 0:
        return ("No matched-retention row: the table compares trained rows (a student objective) on reranking "
                "collections with retained-set thresholds, and this run has none (docs/methods/jaccard.md).\n")
    lines = ["| row | Jaccard (paper's form) | set flip (paper's form) | retention gap | Jaccard (presdep's) "
             "| set flip (presdep's) | datasets | seeds |", "|---|---|---|---|---|---|---|---|"]
    for r in table.iter_rows(named=True):
        lines.append(f"| {r['label']} | {_f(r['jaccard'])} | {_f(r['set_flip'])} | {_f(r['retention_gap'])} | "
                     f"{_f(r['presdep_matched_jaccard'])} | {_f(r['presdep_matched_set_flip'])} | "
                     f"{r['datasets']} | {r['seeds']} |")
    note = ("\nPaper's form: each arm's threshold re-tuned on its grid so that its mean development canonical "
            "retention is closest to single-order distillation's at its own t* (retention gap: how far it stays), "
            "then Jaccard and set flip on the test half; set flip is undefined where nothing is ever retained "
            "(`set_flip_zero` in the CSV counts those queries as 0, presdep's rule). presdep's form: every shuffle "
            "keeps as many documents as the canonical presentation at t* (docs/methods/jaccard.md).\n")
    return "\n".join(lines) + "\n" + note


def write_matched_retention(reference_paths: Sequence[str | Path], metrics_paths: Sequence[str | Path],
                            variants: Mapping[str, Variant], out_csv: str | Path, out_md: str | Path) -> pl.DataFrame:
    """The matched-retention table as CSV and Markdown (rule ``matched_retention``)."""
    reference = load_metrics(reference_paths) if reference_paths else load_metrics(metrics_paths).clear()
    table = matched_table(reference, load_metrics(metrics_paths), variants)
    log.info("matched retention: %d trained rows", table.height)
    write_text_atomic(out_csv, table.write_csv(float_precision=6))
    write_text_atomic(out_md, to_markdown(table))
    return table


__all__ = ["COLUMNS", "matched_table", "to_markdown", "write_matched_retention"]
