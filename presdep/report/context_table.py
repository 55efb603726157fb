"""The context-decomposition table: per run and dataset, each arm's nDCG@10, the four terms with
query-bootstrap 95% intervals, the scaffold share and the donors' length error
(docs/methods/context-decomposition.md).

A run (one label) is one or more ``metrics`` frames of :func:`presdep.metrics.context.context_metrics`
(one per dataset). Each term's interval resamples the dataset's queries (``resamples`` draws of
as many queries with replacement, ``seed``), the percentile interval of the resampled means.
The scaffold share is mean(A4 - A1) / mean(A2 - A1): the part of the width effect the answer
skeleton alone carries (null where the width term's mean is 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_text_atomic
from presdep.metrics.context import (
    CANONICAL_PERTURBATION,
    DEFAULT_K,
    DONORS_PERTURBATION,
    SHUFFLED_PERTURBATION,
    TERMS,
)
from presdep.report.bootstrap import percentile_interval
from presdep.report.pool_table import runs_by_label

PERTURBATIONS = (CANONICAL_PERTURBATION, SHUFFLED_PERTURBATION)
ARM_METRICS = tuple(f"ndcg{DEFAULT_K}_A{i}" for i in range(1, 5))
SCAFFOLD_SHARE = "scaffold_share"
TABLE_SCHEMA = {"label": pl.String, "dataset": pl.String, "perturbation": pl.String, "metric": pl.String,
                "value": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "queries": pl.Int64}


@dataclass(frozen=True)
class ContextTableSettings:
    resamples: int = 10000  # the paper's
    seed: int = 0


def query_bootstrap(values: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """The 95% percentile interval of the mean over ``resamples`` query resamples."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan
    draws = np.random.default_rng(seed).integers(0, v.size, size=(resamples, v.size))
    low, high = percentile_interval(v[draws].mean(axis=1))
    return float(low), float(high)


def _rows_of(label: str, frame: pl.DataFrame, settings: ContextTableSettings) -> list[dict]:
    out: list[dict] = []
    for (dataset,), part in frame.group_by("dataset", maintain_order=True):
        per_query = part.filter(pl.col("query_id").is_not_null() & pl.col("value").is_not_null())
        for pert in PERTURBATIONS:
            mine = per_query.filter(pl.col("perturbation") == pert)
            metrics = mine["metric"].unique(maintain_order=True).to_list()
            for metric in metrics:
                v = mine.filter(pl.col("metric") == metric)["value"].to_numpy()
                low, high = (query_bootstrap(v, settings.resamples, settings.seed) if metric in TERMS
                             else (math.nan, math.nan))
                out.append({"label": label, "dataset": dataset, "perturbation": pert, "metric": metric,
                            "value": float(v.mean()) if v.size else math.nan, "ci_low": low, "ci_high": high,
                            "queries": int(v.size)})
            means = {r["metric"]: r["value"] for r in out if r["dataset"] == dataset and r["perturbation"] == pert
                     and r["label"] == label}
            if "skeleton" in means and "width" in means:
                share = means["skeleton"] / means["width"] if means["width"] else math.nan
                out.append({"label": label, "dataset": dataset, "perturbation": pert, "metric": SCAFFOLD_SHARE,
                            "value": share, "ci_low": math.nan, "ci_high": math.nan,
                            "queries": int(mine.filter(pl.col("metric") == "width").height)})
        donors = part.filter((pl.col("perturbation") == DONORS_PERTURBATION) & pl.col("query_id").is_null())
        for metric, value in donors.select("metric", "value").iter_rows():
            out.append({"label": label, "dataset": dataset, "perturbation": DONORS_PERTURBATION, "metric": metric,
                        "value": value, "ci_low": math.nan, "ci_high": math.nan, "queries": None})
    return out


def context_table(runs: Mapping[str, pl.DataFrame], settings: ContextTableSettings = ContextTableSettings()
                  ) -> pl.DataFrame:
    """``TABLE_SCHEMA`` rows: per run (in the order given), dataset and perturbation, every metric's
    mean over queries, the terms' intervals, the scaffold share and the donors' figures."""
    if not runs:
        raise InvalidInput("context decomposition table: no runs given")
    rows = [r for label, frame in runs.items() for r in _rows_of(label, frame, settings)]
    table = pl.DataFrame(rows, schema=TABLE_SCHEMA, orient="row")
    return table.with_columns(pl.col(c).fill_nan(None) for c in ("value", "ci_low", "ci_high"))


def _num(x: float | None, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def to_markdown(table: pl.DataFrame, settings: ContextTableSettings = ContextTableSettings()) -> str:
    """One row per (run, dataset, order): the arms, each term with its interval, the scaffold share;
    below it the donors' length error."""
    if table.height == 0:
        return ("No context-decomposition row: no run here scored the four arms (they read rows whose scorer reads "
                "slots or document ids; docs/methods/context-decomposition.md).\n")
    cells = {(r["label"], r["dataset"], r["perturbation"], r["metric"]): r for r in table.iter_rows(named=True)}
    terms = [t for t in TERMS if any(k[3] == t for k in cells)]
    header = ["Run", "Dataset", "Order", "Queries", *[f"nDCG@{DEFAULT_K} {m[-2:]}" for m in ARM_METRICS],
              *[f"{t.replace('_', ' ')} ({TERMS[t][0]} - {TERMS[t][1]})" for t in terms], "scaffold share"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, dataset in table.select("label", "dataset").unique(maintain_order=True).iter_rows():
        for pert in PERTURBATIONS:
            got = {m: cells.get((label, dataset, pert, m)) for m in (*ARM_METRICS, *terms, SCAFFOLD_SHARE)}
            if not any(got.values()):
                continue
            queries = next((r["queries"] for r in got.values() if r and r["queries"] is not None), "")
            arm_cells = [_num((got[m] or {}).get("value")) for m in ARM_METRICS]
            term_cells = [(f"{_num(got[t]['value'], True)} [{_num(got[t]['ci_low'], True)}, "
                           f"{_num(got[t]['ci_high'], True)}]") if got[t] else "" for t in terms]
            order = "canonical" if pert == CANONICAL_PERTURBATION else "order-averaged"
            lines.append("| " + " | ".join([label, dataset, order, str(queries), *arm_cells, *term_cells,
                                            _num((got[SCAFFOLD_SHARE] or {}).get("value"))]) + " |")
    donors = table.filter(pl.col("perturbation") == DONORS_PERTURBATION)
    if donors.height:
        lines += ["", "| Run | Dataset | companions replaced | length error mean (chars) | p95 | exact share |",
                  "|---|---|---|---|---|---|"]
        for label, dataset in donors.select("label", "dataset").unique(maintain_order=True).iter_rows():
            d = {m: cells[(label, dataset, DONORS_PERTURBATION, m)]["value"] for m in
                 ("companions", "length_error_mean", "length_error_p95", "length_exact_share")
                 if (label, dataset, DONORS_PERTURBATION, m) in cells}
            lines.append(f"| {label} | {dataset} | {int(d['companions']) if d.get('companions') else ''} | "
                         f"{_num(d.get('length_error_mean'))} | {_num(d.get('length_error_p95'))} | "
                         f"{_num(d.get('length_exact_share'))} |")
    note = (f"\nnDCG@{DEFAULT_K} per arm: A1 the document alone; A2 the ordinary chunked read; A3 its real slot and "
            "width with every companion replaced by a donor of about its length from another query; A4 the "
            "document alone under its label with the full skeleton. The terms close: width = companion content + "
            "companion presence + skeleton. Order-averaged: each document's mean score over the shuffles, ranked "
            "once (ties by first-stage rank). Means over the queries; 95% query-bootstrap intervals "
            f"({settings.resamples} resamples, seed {settings.seed}); scaffold share = skeleton / width. "
            "docs/methods/context-decomposition.md.\n")
    return "\n".join(lines) + "\n" + note


def write_context_table(runs: Mapping[str, pl.DataFrame], *, csv: str | Path, markdown: str | Path,
                        settings: ContextTableSettings = ContextTableSettings()) -> pl.DataFrame:
    """The table as CSV and Markdown; atomic writes."""
    table = context_table(runs, settings)
    write_text_atomic(csv, table.write_csv(float_precision=6))
    write_text_atomic(markdown, to_markdown(table, settings))
    return table


__all__ = ["ARM_METRICS", "ContextTableSettings", "SCAFFOLD_SHARE", "TABLE_SCHEMA", "context_table",
           "query_bootstrap", "runs_by_label", "to_markdown", "write_context_table"]
