"""A run: one provider over a split -> a JSON run report for ``presdep stability``.

Report layout (the fields ``presdep stability`` reads, plus ``summary``)::

    {"model": "mock-s7", "seed": 0,          # seed = index of this repeated run
     "higherIsBetter": true, "metric": "accuracy",
     "tasks": [{"id": "arith-01-v1", "score": 1}, ...],
     "summary": {"benchmark", "split", "provider": {...public settings},
                 "mean", "interval95": [lo, hi],   # Wilson score interval over tasks
                 "totals": {"tasks", "answered", "correct", "failed"}, "failedIds": [...],
                 "failureShare", "maxFailureShare",
                 "errors": {id: why a request failed},
                 "answers": {id: the raw reply or null},   # what the grader read
                 "byFamily": {family: {"tasks", "correct", "mean"}},
                 "byVariant": {variant: {"tasks", "correct", "mean"}}}}

A failed request is a failure, not a wrong answer: its task reads
``{"id": ..., "score": null, "failed": true}``, and ``mean`` and ``interval95`` are
over the answered tasks (null when none was). A run whose failed share is above
``maxFailureShare`` (default :data:`MAX_FAILURE_SHARE`) is marked ``"incomplete":
true``; ``presdep bench run`` then exits non-zero and ``presdep stability`` refuses
the report (see presdep.report.run_reports).

``write_report`` does not replace an earlier report: a re-run into the same place
raises :class:`ReportExists` (``presdep bench run`` exits 2 naming the file) unless
``overwrite`` (``--overwrite``) is given.

The Wilson interval treats tasks as independent; the item-clustered intervals (five
variants of an item drawn together) are what ``presdep stability`` reports.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from presdep.bench.grader import score_answer
from presdep.bench.providers import Provider
from presdep.contracts.errors import InvalidInput, PresdepError
from presdep.contracts.schemas import write_text_atomic
from presdep.report.run_reports import MAX_FAILURE_SHARE

BENCHMARK = "presdep-bench"
Z95 = 1.959963984540054


def wilson_interval(correct: int, n: int, z: float = Z95) -> list[float]:
    if n == 0:
        raise InvalidInput("Wilson interval of zero tasks")
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _groups(tasks: Sequence[Mapping[str, Any]], scores: Sequence[int], key: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for t, s in zip(tasks, scores):
        g = out.setdefault(t[key], {"tasks": 0, "correct": 0})
        g["tasks"] += 1
        g["correct"] += s
    for g in out.values():
        g["mean"] = g["correct"] / g["tasks"]
    return dict(sorted(out.items()))


def run_benchmark(provider: Provider, tasks: Sequence[Mapping[str, Any]], *, run: int = 0,
                  split: str = "public", max_failure_share: float = MAX_FAILURE_SHARE) -> dict[str, Any]:
    """Answer and grade every task; return the run report (see the module docstring)."""
    if not tasks:
        raise InvalidInput("run_benchmark: no tasks to run")
    if not 0.0 <= max_failure_share <= 1.0:
        raise InvalidInput(f"run_benchmark: max_failure_share must lie in [0, 1], got {max_failure_share!r}")
    replies = provider.answer(tasks)
    if len(replies) != len(tasks):
        raise RuntimeError(f"provider {provider.model_id!r} returned {len(replies)} replies for {len(tasks)} tasks")
    answered = [(t, score_answer(t, r.text)) for t, r in zip(tasks, replies) if r.text is not None]
    failed = [t["id"] for t, r in zip(tasks, replies) if r.text is None]
    correct = sum(s for _, s in answered)
    share = len(failed) / len(tasks)
    graded = {t["id"]: s for t, s in answered}
    rows = [{"id": t["id"], "score": graded[t["id"]]} if t["id"] in graded
            else {"id": t["id"], "score": None, "failed": True} for t in tasks]
    return {
        "model": provider.model_id,
        "seed": int(run),
        "higherIsBetter": True,
        "metric": "accuracy",
        "incomplete": share > max_failure_share,
        "tasks": rows,
        "summary": {
            "benchmark": BENCHMARK,
            "split": split,
            "provider": provider.describe(),
            "mean": correct / len(answered) if answered else None,
            "interval95": wilson_interval(correct, len(answered)) if answered else None,
            "totals": {"tasks": len(tasks), "answered": len(answered), "correct": correct, "failed": len(failed)},
            "failureShare": share,
            "maxFailureShare": max_failure_share,
            "failedIds": failed,
            "errors": {t["id"]: r.error for t, r in zip(tasks, replies) if r.text is None},
            "byFamily": _groups([t for t, _ in answered], [s for _, s in answered], "family"),
            "byVariant": _groups([t for t, _ in answered], [s for _, s in answered], "variant"),
            "answers": {t["id"]: r.text for t, r in zip(tasks, replies)},
        },
    }


def report_name(report: Mapping[str, Any]) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in report["model"])
    return f"{safe}-run{report['seed']}.json"


def report_path(model_id: str, run: int, out: str | os.PathLike) -> Path:
    """Where the report of run ``run`` of ``model_id`` goes: ``out`` itself if it names a .json file,
    else ``<out>/<model>-run<k>.json``."""
    out = Path(out)
    return out if out.suffix == ".json" else out / report_name({"model": model_id, "seed": run})


class ReportExists(PresdepError, FileExistsError):
    """A run report is already where a run would write its own; ``path`` is that file."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        super().__init__(f"{path}: a run report already exists (from an earlier run); re-run with --overwrite to "
                         "replace it, or give another --out folder")


def refuse_existing(paths: Sequence[str | os.PathLike]) -> None:
    """ReportExists for the first of ``paths`` that is already there."""
    for p in paths:
        if Path(p).exists():
            raise ReportExists(p)


def write_report(report: Mapping[str, Any], out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write a run report atomically; ``out`` is a file, or a folder for ``<model>-run<k>.json``.

    An existing report is replaced only with ``overwrite``; else ReportExists, the file untouched.
    """
    path = report_path(report["model"], report["seed"], out)
    if not overwrite:
        refuse_existing([path])
    return write_text_atomic(path, json.dumps(report, indent=1) + "\n")
