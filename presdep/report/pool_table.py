"""The pool-perturbation table: per run and dataset the means, and contrasts between runs.

A run (one label) is one or more ``metrics`` frames of :func:`presdep.metrics.pool.pool_metrics`
(one per dataset). The means are over a dataset's queries; the ``all`` row weighs every
dataset the same, as the contrasts do. A contrast a - b is the paired hierarchical
bootstrap of :func:`presdep.report.contrast_bootstrap.paired_difference` on the
(dataset, query) pairs both runs define: datasets, then queries, drawn once for both sides
(a pool run has no seeds level: each side is one run). Beside each perturbation's metrics the
per-query replace - drop difference of pool-PSI (``pool_replace_minus_drop``), whose mean
is the macro difference.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from presdep.config.records import Variant
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_table, write_text_atomic
from presdep.metrics.pool import DIFFERENCE_PERTURBATION, PERTURBATION, POOL_PSI, metric_names
from presdep.report.contrast_bootstrap import Side, paired_difference

log = logging.getLogger(__name__)

ALL_DATASETS = "all"
TABLE_METRICS = metric_names(10)
# The equivalence test of paired_difference needs a margin; this table reports intervals only.
_NO_MARGIN = 0.0

MEANS_SCHEMA = {"label": pl.String, "dataset": pl.String, "perturbation": pl.String, "metric": pl.String,
                "value": pl.Float64, "queries": pl.Int64}
CONTRASTS_SCHEMA = {"a": pl.String, "b": pl.String, "perturbation": pl.String, "metric": pl.String,
                    "difference": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
                    "excludes_zero": pl.Boolean, "se": pl.Float64, "datasets": pl.Int64, "queries": pl.Int64}


@dataclass(frozen=True)
class PoolTableSettings:
    resamples: int = 20000  # the paper's
    seed: int = 0  # the paper's
    metrics: tuple[str, ...] = TABLE_METRICS


Runs = Mapping[str, pl.DataFrame | Sequence[pl.DataFrame]]


def per_query_rows(runs: Runs, metrics: Sequence[str] = TABLE_METRICS) -> pl.DataFrame:
    """label, dataset, perturbation, query_id, metric, value: every finite per-query value, and
    the per-query replace - drop pool-PSI where a query has both."""
    frames = []
    for label, got in runs.items():
        df = got if isinstance(got, pl.DataFrame) else pl.concat(list(got), how="vertical_relaxed")
        df = df.filter(pl.col("perturbation").is_in(list(PERTURBATION.values())) & pl.col("metric").is_in(list(metrics))
                       & pl.col("query_id").is_not_null() & pl.col("value").is_not_null() & pl.col("value").is_not_nan())
        dup = df.select("dataset", "perturbation", "query_id", "metric").is_duplicated()
        if dup.any():
            r = df.row(int(dup.arg_max()), named=True)
            raise InvalidInput(f"pool table: run {label!r} holds {r['metric']} of query {r['query_id']!r} "
                               f"({r['dataset']}, {r['perturbation']}) twice; one run per label")
        frames.append(df.select("dataset", "perturbation", "query_id", "metric", "value")
                      .with_columns(pl.lit(label, pl.String).alias("label")))
    if not frames:
        raise InvalidInput("pool table: no runs given")
    rows = pl.concat(frames).select("label", "dataset", "perturbation", "query_id", "metric", "value")
    psi = rows.filter(pl.col("metric") == POOL_PSI)
    replace = psi.filter(pl.col("perturbation") == PERTURBATION["replace"]).drop("perturbation")
    drop = psi.filter(pl.col("perturbation") == PERTURBATION["drop"]).drop("perturbation")
    diff = replace.join(drop, on=["label", "dataset", "query_id", "metric"], suffix="_drop").select(
        "label", "dataset", pl.lit(DIFFERENCE_PERTURBATION).alias("perturbation"), "query_id", "metric",
        (pl.col("value") - pl.col("value_drop")).alias("value"))
    return pl.concat([rows, diff])


def pool_means(runs: Runs, settings: PoolTableSettings = PoolTableSettings()) -> pl.DataFrame:
    """``MEANS_SCHEMA`` rows: the mean over a dataset's queries, and dataset ``all`` (the mean of
    the dataset means; queries = their total)."""
    rows = per_query_rows(runs, settings.metrics)
    keys = ["label", "perturbation", "metric"]
    per_dataset = rows.group_by([*keys, "dataset"]).agg(pl.col("value").mean(), pl.len().cast(pl.Int64).alias("queries"))
    overall = per_dataset.group_by(keys).agg(pl.col("value").mean(), pl.col("queries").sum()).with_columns(
        pl.lit(ALL_DATASETS).alias("dataset"))
    out = pl.concat([per_dataset.select(list(MEANS_SCHEMA)), overall.select(list(MEANS_SCHEMA))])
    return _ordered(out.cast(MEANS_SCHEMA), list(runs), settings.metrics)  # type: ignore[arg-type]


def _ordered(df: pl.DataFrame, labels: Sequence[str], metrics: Sequence[str]) -> pl.DataFrame:
    """Runs in the order given, datasets alphabetically with ``all`` last, perturbations and metrics as written."""
    perts = [*PERTURBATION.values(), DIFFERENCE_PERTURBATION]
    lab = {x: i for i, x in enumerate(labels)}
    return df.sort(pl.col("label").replace_strict(lab, default=len(lab), return_dtype=pl.Int64),
                   pl.col("dataset") == ALL_DATASETS, "dataset",
                   pl.col("perturbation").replace_strict({p: i for i, p in enumerate(perts)}, return_dtype=pl.Int64),
                   pl.col("metric").replace_strict({m: i for i, m in enumerate(metrics)}, default=len(metrics),
                                                   return_dtype=pl.Int64))


def contrast_sides(rows: pl.DataFrame, a: str, b: str, perturbation: str, metric: str) -> tuple[Side, Side, int] | None:
    """Both runs' values on the (dataset, query) pairs both define: datasets and queries sorted."""
    sel = rows.filter((pl.col("perturbation") == perturbation) & (pl.col("metric") == metric))
    got = {lab: {(d, q): v for d, q, v in sel.filter(pl.col("label") == lab).select("dataset", "query_id", "value")
                 .iter_rows()} for lab in (a, b)}
    keys = set(got[a]) & set(got[b])
    if not keys:
        return None
    datasets = sorted({d for d, _ in keys})
    queries = {d: sorted(q for dd, q in keys if dd == d) for d in datasets}

    def side(lab: str) -> Side:
        return Side([np.array([[got[lab][(d, q)] for q in queries[d]]]) for d in datasets], (None,))

    return side(a), side(b), len(keys)


def pool_contrasts(runs: Runs, pairs: Sequence[tuple[str, str]],
                   settings: PoolTableSettings = PoolTableSettings()) -> pl.DataFrame:
    """``CONTRASTS_SCHEMA`` rows: a - b of every metric of both perturbations and of replace - drop."""
    unknown = sorted({x for p in pairs for x in p} - set(runs))
    if unknown:
        raise InvalidInput(f"pool contrasts: no run labelled {unknown}; runs: {sorted(runs)}")
    rows = per_query_rows(runs, settings.metrics)
    targets = [(p, m) for p in PERTURBATION.values() for m in settings.metrics] + [(DIFFERENCE_PERTURBATION, POOL_PSI)]
    out = []
    for a, b in pairs:
        for pert, metric in targets:
            sides = contrast_sides(rows, a, b, pert, metric)
            if sides is None:
                log.info("pool contrasts: %s and %s share no query with %s/%s", a, b, pert, metric)
                continue
            sa, sb, n = sides
            d = paired_difference(sa, sb, resamples=settings.resamples, seed=settings.seed, margin=_NO_MARGIN)
            out.append({"a": a, "b": b, "perturbation": pert, "metric": metric, "difference": d.estimate,
                        "ci_low": d.low, "ci_high": d.high, "excludes_zero": d.excludes_zero, "se": d.se,
                        "datasets": len(sa.values), "queries": n})
    return pl.DataFrame(out, schema=CONTRASTS_SCHEMA)


def _num(x: float | None, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def _column(perturbation: str, metric: str) -> str:
    return f"{perturbation.removeprefix('pool_').replace('_', ' ')}: {metric}"


def to_markdown(means: pl.DataFrame, contrasts: pl.DataFrame, settings: PoolTableSettings = PoolTableSettings()) -> str:
    """One row per (run, dataset) with every mean; below it the contrasts with their intervals."""
    if means.height == 0:
        return ("No pool-perturbation row: no run here scored a perturbed pool (pool_perturbation reads reranking "
                "rows with calibration none and bsc_k 1; docs/methods/pool-perturbation.md).\n")
    cells = {(r["label"], r["dataset"], r["perturbation"], r["metric"]): r for r in means.iter_rows(named=True)}
    present = {(p, m) for _, _, p, m in cells}  # a metric no run has gets no empty column
    cols = [(p, m) for p in PERTURBATION.values() for m in settings.metrics] + [(DIFFERENCE_PERTURBATION, POOL_PSI)]
    cols = [c for c in cols if c in present]
    header = ["Run", "Dataset", "Queries", *[_column(p, m) for p, m in cols]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, dataset in means.select("label", "dataset").unique(maintain_order=True).iter_rows():
        psi = cells.get((label, dataset, PERTURBATION["replace"], POOL_PSI))
        values = [_num((cells.get((label, dataset, p, m)) or {}).get("value"), p == DIFFERENCE_PERTURBATION)
                  for p, m in cols]
        lines.append("| " + " | ".join([label, dataset, str(psi["queries"]) if psi else "", *values]) + " |")
    lines += ["", "| a - b | column | difference | 95% interval | excludes 0 | datasets | queries |",
              "|---|---|---|---|---|---|---|"]
    for r in contrasts.iter_rows(named=True):
        lines.append(f"| {r['a']} - {r['b']} | {_column(r['perturbation'], r['metric'])} | "
                     f"{_num(r['difference'], True)} | [{_num(r['ci_low'], True)}, {_num(r['ci_high'], True)}] | "
                     f"{'yes' if r['excludes_zero'] else 'no'} | {r['datasets']} | {r['queries']} |")
    if contrasts.height == 0:
        lines.append("| (no contrasts asked for) | | | | | | |")
    note = (f"\nMeans over a dataset's queries; `{ALL_DATASETS}` weighs every dataset the same. Metrics on the "
            "documents the canonical and the perturbed pool share. Contrasts: paired hierarchical bootstrap "
            f"(datasets, then queries), {settings.resamples} resamples, seed {settings.seed}, 95% percentile interval.\n")
    return "\n".join(lines) + "\n" + note


def runs_by_label(metrics_paths: Sequence[str | Path], variants: Mapping[str, Variant]) -> dict[str, pl.DataFrame]:
    """The pool metrics files as runs keyed by their row's label (config order)."""
    by_variant: dict[str, list[pl.DataFrame]] = {}
    for path in metrics_paths:
        frame = read_table(path, "metrics")
        if frame.height:  # one file per dataset of a run
            by_variant.setdefault(str(frame["variant"][0]), []).append(frame)
    return {v.label: pl.concat(by_variant[name]) for name, v in variants.items() if name in by_variant}


def write_pool_table(runs: Runs, *, means_csv: str | Path, markdown: str | Path, contrasts_csv: str | Path | None = None,
                     pairs: Sequence[tuple[str, str]] = (),
                     settings: PoolTableSettings = PoolTableSettings()) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The means (and the contrasts, where pairs are given) as CSV, both as one Markdown file; atomic writes."""
    means = pool_means(runs, settings)
    contrasts = pool_contrasts(runs, pairs, settings)
    write_text_atomic(means_csv, means.write_csv(float_precision=6))
    if contrasts_csv is not None:
        write_text_atomic(contrasts_csv, contrasts.write_csv(float_precision=6))
    write_text_atomic(markdown, to_markdown(means, contrasts, settings))
    return means, contrasts


__all__ = [
    "ALL_DATASETS", "CONTRASTS_SCHEMA", "MEANS_SCHEMA", "TABLE_METRICS", "PoolTableSettings", "contrast_sides",
           "per_query_rows", "pool_contrasts", "pool_means", "runs_by_label", "to_markdown", "write_pool_table"]
