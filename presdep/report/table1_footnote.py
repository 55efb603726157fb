"""Table 1's footnote: the run's design (M, B, depth, queries) and links to the methods pages.

The design is read from the metrics files (presdep.metrics.design_rows) and the counts file,
so it is what ran: a dataset's own M or B, a k_input cut, a seeded query sample. Definitions
live on the methods pages; the footnote links them instead of repeating them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping

import polars as pl

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.views import RANDOM_SHUFFLE
from presdep.metrics.design_rows import DESIGN_METRICS

_TASK_NAMES = {"rerank": "rerank", "qa": "QA", "response": "resp"}


def _number(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return _number(lo) if _number(lo) == _number(hi) else f"{_number(lo)}-{_number(hi)}"


def design(metrics: pl.DataFrame, bsc_variants: Collection[str] = ()) -> dict[str, dict[str, str]]:
    """task -> {"M", "B", "depth"}: each as one number or a range over the datasets; M leaves out
    BSC rows (their shuffles are E x K single passes) unless only they have shuffles."""
    rows = metrics.filter(pl.col("metric").is_in(list(DESIGN_METRICS)) & pl.col("query_id").is_null()
                          & (pl.col("perturbation") == RANDOM_SHUFFLE) & pl.col("value").is_not_null())
    out: dict[str, dict[str, str]] = {}
    for task in _TASK_NAMES:
        mine = rows.filter(pl.col("task") == task)
        if mine.height == 0:
            continue
        said = {}
        for key, metric in (("M", "shuffles_per_query"), ("B", "prompt_width"), ("depth", "candidates_per_query")):
            part = mine.filter(pl.col("metric") == metric)
            if key == "M" and part.filter(~pl.col("variant").is_in(list(bsc_variants))).height:
                part = part.filter(~pl.col("variant").is_in(list(bsc_variants)))
            if part.height:
                # the most common value per dataset, so one odd variant does not widen the range
                per_dataset = [Counter(g["value"].to_list()).most_common(1)[0][0]
                               for _, g in sorted(part.group_by("dataset"), key=lambda kv: kv[0])]
                said[key] = _span(per_dataset)
        out[task] = said
    return out


def query_counts(counts: pl.DataFrame) -> dict[str, dict[str, int]]:
    """task -> {"queries": of its quality cell, "test": of the Jaccard cell (reranking)}: the
    largest count over the table's variants."""
    out: dict[str, dict[str, int]] = {}
    for column, spec in TABLE1_COLUMNS.items():
        if not (spec.metric.startswith("ndcg") or spec.metric == "jaccard"):
            continue
        hit = counts.filter(pl.col("column") == column)["queries"].drop_nulls()
        if hit.len():
            out.setdefault(spec.task, {})["test" if spec.metric == "jaccard" else "queries"] = int(hit.max())
    return out


def _per_task(values: Mapping[str, str], unit: str) -> str:
    """'8 (rerank), 4 (QA)', or '8' when every task has the same value; ``unit`` after the first."""
    if len(set(values.values())) == 1:
        return f"{next(iter(values.values()))} {unit}"
    return ", ".join(f"{v} {unit} ({_TASK_NAMES[t]})" if i == 0 else f"{v} ({_TASK_NAMES[t]})"
                     for i, (t, v) in enumerate(values.items()))


def footnote(design_by_task: Mapping[str, Mapping[str, str]], queries: Mapping[str, Mapping[str, int]],
             docs: str) -> str:
    """The paragraph under Table 1 (``docs``: the path from table1.md to docs/methods/)."""
    run = []
    for key, unit in (("M", "shuffles per query"), ("B", "candidates per prompt"), ("depth", "candidates per query")):
        values = {t: d[key] for t, d in design_by_task.items() if key in d}
        if values:
            run.append(f"{'depth' if key == 'depth' else key + ' ='} {_per_task(values, unit)}")
    counted = []
    for task, q in queries.items():
        if "queries" in q:
            test = f" ({q['test']} on the test half)" if "test" in q else ""
            counted.append(f"{q['queries']} {_TASK_NAMES[task]}{test}")
    if counted:
        run.append("queries " + ", ".join(counted))
    lines = []
    if run:
        lines.append("Run: " + "; ".join(run) + ".")
    lines.append(
        "Cells: mean over datasets of per-dataset means over queries, then over training seeds "
        f"([averaging]({docs}table1.md#how-a-cell-is-averaged)). "
        f"nDCG: one pass over the first-stage order, higher is better ([nDCG]({docs}ndcg.md)); "
        f"tau-PSI: rank instability over the shuffles, lower is more stable, 0.5 is chance "
        f"([tau-PSI]({docs}tau-psi.md)); Jacc.: overlap of the sets a tuned threshold keeps, higher is more "
        f"stable ([Jaccard]({docs}jaccard.md)); flips: lower is more stable ([answer flip]({docs}answer-flip.md), "
        f"[pair flip]({docs}pair-flip.md)). Each cell's source, counts and diagnostics: table1_counts.csv "
        f"([its columns]({docs}table1.md#resultstable1_countscsv)).")
    return "\n" + "\n\n".join(lines) + "\n"


__all__ = ["design", "footnote", "query_counts"]
