"""The paper's Table 1 from metrics files: means over queries, then datasets, then seeds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import polars as pl

from presdep.schemas import read_table, write_text_atomic

from presdep.columns import COLUMN_TITLES, TABLE1_COLUMNS


def load_metrics(paths: Iterable[str | Path]) -> pl.DataFrame:
    frames = [read_table(p, "metrics") for p in paths]
    if not frames:
        raise ValueError("no metrics files given")
    return pl.concat(frames, how="vertical")


def cell_values(metrics: pl.DataFrame) -> pl.DataFrame:
    """One value and its counts per (variant, column).

    Aggregate rows (query_id null) already hold the mean over a dataset's queries.
    Datasets are averaged within each seed, then seeds are averaged.
    """
    out = []
    for column, (task, metric, perturbation, _) in TABLE1_COLUMNS.items():
        per_query = metrics.filter(
            (pl.col("task") == task) & (pl.col("metric") == metric) & (pl.col("perturbation") == perturbation)
        )
        agg = per_query.filter(pl.col("query_id").is_null() & pl.col("value").is_not_null())
        if agg.height == 0:
            continue
        n_queries = (
            per_query.filter(pl.col("query_id").is_not_null() & pl.col("value").is_not_null())
            .group_by("variant", "dataset")
            .agg(pl.col("query_id").n_unique().alias("q"))
            .group_by("variant")
            .agg(pl.col("q").sum().alias("queries"))
        )
        seeded = agg.with_columns(pl.col("seed").fill_null(-1))
        by_seed = seeded.group_by("variant", "seed").agg(
            pl.col("value").mean().alias("value"), pl.col("dataset").n_unique().alias("datasets")
        )
        cell = by_seed.group_by("variant").agg(
            pl.col("value").mean().alias("value"),
            pl.col("datasets").max().alias("datasets"),
            pl.col("seed").n_unique().alias("seeds"),
        )
        cell = cell.join(n_queries, on="variant", how="left").with_columns(pl.lit(column).alias("column"))
        out.append(cell.select("variant", "column", "value", "queries", "datasets", "seeds"))
    if not out:
        return pl.DataFrame(schema={"variant": pl.String, "column": pl.String, "value": pl.Float64,
                                    "queries": pl.UInt32, "datasets": pl.UInt32, "seeds": pl.UInt32})
    return pl.concat(out, how="vertical_relaxed")


def build_table1(metrics: pl.DataFrame, variants: Mapping[str, Mapping]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(table, counts): one row per configured variant in config order; skipped ones keep their reason."""
    cells = cell_values(metrics)
    rows, counts = [], []
    for name, v in variants.items():
        row: dict = {"variant": name}
        for column in TABLE1_COLUMNS:
            hit = cells.filter((pl.col("variant") == name) & (pl.col("column") == column))
            row[column] = float(hit["value"][0]) if hit.height else None
            if hit.height:
                counts.append({"variant": name, "column": column, "queries": int(hit["queries"][0] or 0),
                               "datasets": int(hit["datasets"][0]), "seeds": int(hit["seeds"][0])})
        row["label"] = str(v.get("label", name))
        row["note"] = f"skipped: {v['skip']}" if v.get("skip") else str(v.get("note", ""))
        rows.append(row)
    schema = {"variant": pl.String, **{c: pl.Float64 for c in TABLE1_COLUMNS}, "label": pl.String, "note": pl.String}
    table = pl.DataFrame(rows, schema=schema)
    count_schema = {"variant": pl.String, "column": pl.String, "queries": pl.Int64, "datasets": pl.Int64, "seeds": pl.Int64}
    return table, pl.DataFrame(counts, schema=count_schema)


def _fmt(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def to_markdown(table: pl.DataFrame, columns: Sequence[str] | None = None) -> str:
    """Table 1 as Markdown: task columns that no variant filled are left out."""
    cols = [c for c in (columns or TABLE1_COLUMNS) if table[c].is_not_null().any()]
    header = ["Variant", *[COLUMN_TITLES[c] for c in cols], "Note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.iter_rows(named=True):
        cells = [row["label"], *[_fmt(row[c]) for c in cols], row["note"] or ""]
        lines.append("| " + " | ".join(cells) + " |")
    legend = (
        "\nValues are means over queries, then datasets, then training seeds, under random "
        "shuffles of each query's candidate list (M presentations). tau-PSI: (1 - mean pairwise "
        "Kendall tau)/2, lower is more stable; Jacc.: Jaccard of the retained sets at a threshold "
        "tuned once on the first-stage presentation, higher is more stable.\n"
    )
    return "\n".join(lines) + "\n" + legend


def write_table1(metrics_paths: Iterable[str | Path], variants: Mapping[str, Mapping],
                 out_csv: str | Path, out_md: str | Path, out_counts: str | Path) -> pl.DataFrame:
    paths = list(metrics_paths)
    metrics = load_metrics(paths) if paths else pl.DataFrame()
    if metrics.height:
        table, counts = build_table1(metrics, variants)
    else:
        table, counts = build_table1(_empty_metrics(), variants)
    write_text_atomic(out_csv, table.write_csv(float_precision=6))
    write_text_atomic(out_md, to_markdown(table))
    write_text_atomic(out_counts, counts.write_csv())
    return table


def _empty_metrics() -> pl.DataFrame:
    return pl.DataFrame(schema={"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
                                "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64})
