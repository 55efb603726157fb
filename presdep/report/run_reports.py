"""JSON run reports: per-task scores of one model run, read strictly and written from metrics.

Format (one file per run)::

    {"model": "OC-SFT",                 # required, non-empty string
     "tasks": [{"id": "q17-v2",         # required, non-empty string, unique per dataset
                "score": 0.73,          # required, a number in [0, 1] (null only when failed)
                "failed": false,        # optional: true = the request failed, score null
                "dataset": "scifact"}], # optional (default "report"): the bootstrap's top level
     "seed": 2,                         # optional integer: which repeated run this is
     "higherIsBetter": false,           # optional: direction of the score
     "column": "rerank_tau_psi",        # optional provenance
     "metric": "tau_psi",               # optional provenance
     "incomplete": false,               # optional: true = too many failed requests
     "summary": {...}}                  # optional object, not read (a benchmark run's totals)

Failed requests are not scores. A failed task is left out of the bootstrap (it is
not shared by every run, so the warning about unshared items names it); a report
marked ``incomplete``, or whose failed share is above :data:`MAX_FAILURE_SHARE`, is
refused: its mean would describe the endpoint, not the model.

Several files of one model are repeated runs and are treated like training seeds.
Task ids ending in ``-vN`` are variants of one item (``q17-v1``, ``q17-v2`` -> ``q17``):
the bootstrap draws them together as one cluster, and the suffix (``v2``) is the
prompt variant whose separate ranking ``promptSensitivity`` reports.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import polars as pl

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.errors import InputFormatError, ReportError
from presdep.contracts.schemas import write_text_atomic
from presdep.report.metric_columns import column_values
from presdep.runtime.text_files import read_text_file

__all__ = ["DEFAULT_DATASET", "MAX_FAILURE_SHARE", "ReportError", "RunReport", "export_report", "prompt_variant", "read_report",
           "reports_frame", "task_cluster"]

DEFAULT_DATASET = "report"
# Above this share of failed requests a run report is not a measurement of its model.
MAX_FAILURE_SHARE = 0.05
_VARIANT_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<variant>v\d+)$")
_TOP_REQUIRED = {"model", "tasks"}
_TOP_OPTIONAL = {"seed", "higherIsBetter", "column", "metric", "summary", "incomplete"}
_TASK_REQUIRED = {"id", "score"}
_TASK_OPTIONAL = {"dataset", "failed"}


def task_cluster(task_id: str) -> str:
    """The item a task id belongs to: ``-vN`` variants share their base id."""
    m = _VARIANT_SUFFIX.match(task_id)
    return m.group("base") if m else task_id


def prompt_variant(task_id: str) -> str | None:
    """The prompt variant of a task id (``q17-v2`` -> ``v2``), or None without a suffix."""
    m = _VARIANT_SUFFIX.match(task_id)
    return m.group("variant") if m else None


@dataclass(frozen=True)
class RunReport:
    path: Path
    model: str
    seed: int | None
    higher_is_better: bool | None
    column: str | None
    metric: str | None
    tasks: list[tuple[str, str, float | None]] = field(default_factory=list)  # (dataset, id, score; None = failed)
    incomplete: bool = False

    @property
    def failed(self) -> int:
        return sum(score is None for _, _, score in self.tasks)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def read_report(path: str | os.PathLike) -> RunReport:
    """Read and validate one JSON run report."""
    path = Path(path)
    try:
        data = json.loads(read_text_file(path))
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not valid JSON ({exc})") from exc
    except InputFormatError as exc:  # not UTF-8
        raise ReportError(str(exc)) from exc
    if not isinstance(data, dict):
        raise ReportError(f"{path}: top level must be an object with 'model' and 'tasks', got {type(data).__name__}")
    missing = sorted(_TOP_REQUIRED - data.keys())
    if missing:
        raise ReportError(f"{path}: missing required key(s) {missing}")
    unknown = sorted(data.keys() - _TOP_REQUIRED - _TOP_OPTIONAL)
    if unknown:
        raise ReportError(f"{path}: unknown key(s) {unknown}; allowed: {sorted(_TOP_REQUIRED | _TOP_OPTIONAL)}")
    model = data["model"]
    if not isinstance(model, str) or not model.strip():
        raise ReportError(f"{path}: 'model' must be a non-empty string, got {model!r}")
    seed = data.get("seed")
    if seed is not None and not _is_int(seed):
        raise ReportError(f"{path}: 'seed' must be an integer, got {seed!r}")
    hib = data.get("higherIsBetter")
    if hib is not None and not isinstance(hib, bool):
        raise ReportError(f"{path}: 'higherIsBetter' must be true or false, got {hib!r}")
    for key in ("column", "metric"):
        if key in data and not isinstance(data[key], str):
            raise ReportError(f"{path}: {key!r} must be a string, got {data[key]!r}")
    incomplete = data.get("incomplete", False)
    if not isinstance(incomplete, bool):
        raise ReportError(f"{path}: 'incomplete' must be true or false, got {incomplete!r}")
    if "summary" in data and not isinstance(data["summary"], dict):
        raise ReportError(f"{path}: 'summary' must be an object, got {type(data['summary']).__name__}")
    tasks = data["tasks"]
    if not isinstance(tasks, list) or not tasks:
        raise ReportError(f"{path}: 'tasks' must be a non-empty list")
    seen: dict[tuple[str, str], int] = {}
    out: list[tuple[str, str, float | None]] = []
    for i, t in enumerate(tasks):
        where = f"{path}: tasks[{i}]"
        if not isinstance(t, dict):
            raise ReportError(f"{where} must be an object with 'id' and 'score', got {t!r}")
        miss = sorted(_TASK_REQUIRED - t.keys())
        if miss:
            raise ReportError(f"{where} ({t!r}) lacks key(s) {miss}")
        unk = sorted(t.keys() - _TASK_REQUIRED - _TASK_OPTIONAL)
        if unk:
            raise ReportError(f"{where} has unknown key(s) {unk}; allowed: {sorted(_TASK_REQUIRED | _TASK_OPTIONAL)}")
        tid, score, failed = t["id"], t["score"], t.get("failed", False)
        if not isinstance(tid, str) or not tid.strip():
            raise ReportError(f"{where}: 'id' must be a non-empty string, got {tid!r}")
        if not isinstance(failed, bool):
            raise ReportError(f"{where} (id {tid!r}): 'failed' must be true or false, got {failed!r}")
        if failed or score is None:
            if not (failed and score is None):
                raise ReportError(f"{where} (id {tid!r}): a failed task has 'failed': true and 'score': null, "
                                  f"got failed={failed!r}, score={score!r}")
        elif isinstance(score, bool) or not isinstance(score, (int, float)):
            raise ReportError(f"{where} (id {tid!r}): 'score' must be a number, got {score!r}")
        elif not math.isfinite(score) or not 0.0 <= score <= 1.0:
            raise ReportError(f"{where} (id {tid!r}): 'score' must lie in [0, 1], got {score!r}")
        ds = t.get("dataset", DEFAULT_DATASET)
        if not isinstance(ds, str) or not ds.strip():
            raise ReportError(f"{where} (id {tid!r}): 'dataset' must be a non-empty string, got {ds!r}")
        if (ds, tid) in seen:
            raise ReportError(f"{where}: duplicate task id {tid!r} (dataset {ds!r}), first at tasks[{seen[(ds, tid)]}]")
        seen[(ds, tid)] = i
        out.append((ds, tid, None if failed else float(score)))
    return RunReport(path, model, seed, hib, data.get("column"), data.get("metric"), out, incomplete)


def _refuse_failed_runs(reports: list[RunReport]) -> None:
    """A run whose requests failed beyond the stated share is not a model's score."""
    bad = [r for r in reports if r.incomplete or r.failed > MAX_FAILURE_SHARE * len(r.tasks)]
    if bad:
        lines = "; ".join(f"{r.path}: {r.failed} of {len(r.tasks)} requests failed"
                          + (" (marked incomplete)" if r.incomplete else "") for r in bad)
        raise ReportError(f"run report(s) with failed requests above {MAX_FAILURE_SHARE:.0%} of their tasks "
                          f"cannot be ranked: {lines}. Fix the provider and rerun `presdep bench run`.")


def reports_frame(paths: Iterable[str | os.PathLike]) -> tuple[pl.DataFrame, bool | None]:
    """Per-task rows of several reports for the bootstrap, and their common direction.

    Returns (frame with dataset, variant, seed, query_id, cluster, value; higherIsBetter
    if the reports state it, else None). Files of one model without ``seed`` are
    numbered 0, 1, ... in path order.
    """
    reports = [read_report(p) for p in sorted(map(Path, paths), key=str)]
    if not reports:
        raise ReportError("no report files given")
    _refuse_failed_runs(reports)
    by_model: dict[str, list[RunReport]] = {}
    for r in reports:
        by_model.setdefault(r.model, []).append(r)
    rows: dict[str, list] = {k: [] for k in ("dataset", "variant", "seed", "query_id", "cluster", "value")}
    for model, runs in by_model.items():
        with_seed = [r for r in runs if r.seed is not None]
        if with_seed and len(with_seed) != len(runs):
            raise ReportError(
                f"model {model!r}: some reports state a seed and others do not: "
                f"{[str(r.path) for r in runs if r.seed is None]} lack 'seed'"
            )
        if with_seed:
            seeds = [r.seed for r in runs]
            first: dict[int, Path] = {}
            for r in runs:
                if r.seed in first:
                    raise ReportError(f"model {model!r}: seed {r.seed} appears in both {first[r.seed]} and {r.path}")
                first[r.seed] = r.path  # type: ignore[index]
        else:
            seeds = list(range(len(runs))) if len(runs) > 1 else [None]
        for r, s in zip(runs, seeds):
            for ds, tid, score in r.tasks:
                rows["dataset"].append(ds)
                rows["variant"].append(model)
                rows["seed"].append(s)
                rows["query_id"].append(tid)
                rows["cluster"].append(task_cluster(tid))
                rows["value"].append(score)
    directions = {r.higher_is_better for r in reports if r.higher_is_better is not None}
    if len(directions) > 1:
        raise ReportError(
            f"reports disagree on higherIsBetter: {[f'{r.path}={r.higher_is_better}' for r in reports]}"
        )
    frame = pl.DataFrame(rows, schema={"dataset": pl.String, "variant": pl.String, "seed": pl.Int64,
                                       "query_id": pl.String, "cluster": pl.String, "value": pl.Float64})
    return frame, (directions.pop() if directions else None)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "variant"


def export_report(metrics_df: pl.DataFrame, column: str, out_dir: str | os.PathLike) -> list[Path]:
    """Write one run report per (variant, seed) of a Table 1 column's per-query metrics.

    Queries whose value is null (metric undefined there) are left out. Returns the
    written paths, sorted.
    """
    values = column_values(metrics_df, column).filter(pl.col("value").is_not_null())
    if values.height == 0:
        raise ReportError(f"metrics: no non-null per-query rows for column {column!r}")
    bad = values.filter((pl.col("value") < 0) | (pl.col("value") > 1) | ~pl.col("value").is_finite())
    if bad.height:
        raise ReportError(f"metrics: report scores must lie in [0, 1]; row {bad.row(0, named=True)}")
    spec = TABLE1_COLUMNS[column]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, tuple[str, Any]] = {}
    paths = []
    for (variant, seed), part in values.sort("variant", "seed", "dataset", "query_id").group_by(
        ["variant", "seed"], maintain_order=True
    ):
        name = _safe_name(variant) + ("" if seed is None else f"-seed{seed}") + ".json"
        if name in written:
            raise ReportError(f"variants {written[name]} and {(variant, seed)} map to the same file name {name}")
        written[name] = (variant, seed)
        doc: dict[str, Any] = {"model": variant}
        if seed is not None:
            doc["seed"] = int(seed)
        doc.update(column=column, metric=spec.metric, higherIsBetter=spec.direction == "higher")
        doc["tasks"] = [
            {"id": q, "dataset": d, "score": float(v)}
            for d, q, v in part.select("dataset", "query_id", "value").iter_rows()
        ]
        paths.append(write_text_atomic(out_dir / name, json.dumps(doc, indent=1) + "\n"))
    return sorted(paths)
