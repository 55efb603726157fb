"""The Python API of the benchmark: every surface (CLI, HTTP, MCP) calls these functions.

Example::

    from presdep.bench import core

    tasks = core.load_split()                      # the public split (300 tasks)
    core.get_task(tasks, "arith-01-v2")["prompt"]
    core.score(tasks, "arith-01-v2", "Answer: $217")          # {"id", "score": 1, ...}
    paths = [core.run("mock", tasks, out="runs", seed=s, run=r)["path"]
             for s, r in [(1, 0), (1, 1), (2, 0)]]
    result = core.stability(paths, seed=4401, resamples=2000, svg="runs/stability.svg")
    result["promptSensitivity"]["ranking"]["v1"]              # models best first on v1 alone
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from presdep import __version__
from presdep.bench.grader import answer_text, score_answer
from presdep.bench.providers import make_provider
from presdep.bench.runner import BENCHMARK, refuse_existing, report_path, run_benchmark, write_report
from presdep.bench.suite import FAMILIES, PUBLIC_PATH, PUBLIC_SEED, VARIANTS, read_split
from presdep.contracts.errors import PresdepError, cut
from presdep.report.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from presdep.report.run_reports import MAX_FAILURE_SHARE
from presdep.report.stability_io import analyse_reports


class UnknownTask(PresdepError, KeyError):
    """No task with that id in the split."""

    def __str__(self) -> str:
        return str(self.args[0])


def load_split(path: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """The tasks of a split file (default: the public split shipped with the package)."""
    return read_split(path or PUBLIC_PATH)


def list_tasks(tasks: Sequence[Mapping[str, Any]], family: str | None = None,
               variant: str | None = None) -> list[dict[str, str]]:
    """Ids with family and variant (no prompts, no answers), optionally filtered."""
    return [{"id": t["id"], "family": t["family"], "variant": t["variant"]} for t in tasks
            if (family is None or t["family"] == family) and (variant is None or t["variant"] == variant)]


def get_task(tasks: Sequence[Mapping[str, Any]], task_id: str, *, with_answer: bool = False) -> dict[str, Any]:
    """One task with its prompt; the expected answer only when asked for."""
    for t in tasks:
        if t["id"] == task_id:
            out = {k: t[k] for k in ("id", "item", "family", "variant", "prompt", "answer_type", "options")}
            if with_answer:
                out["answer"] = t["answer"]
            return out
    raise UnknownTask(f"unknown task id {cut(task_id)}")


def score(tasks: Sequence[Mapping[str, Any]], task_id: str, answer: str) -> dict[str, Any]:
    """Grade one answer: {"id", "score": 0 or 1, "extracted": the answer text the grader read}."""
    task = next((t for t in tasks if t["id"] == task_id), None)
    if task is None:
        raise UnknownTask(f"unknown task id {cut(task_id)}")
    return {"id": task_id, "score": score_answer(task, answer), "extracted": answer_text(answer or "").strip()}


def run(provider: str, tasks: Sequence[Mapping[str, Any]], *, out: str | os.PathLike | None = None,
        run: int = 0, split: str = "public", max_failure_share: float = MAX_FAILURE_SHARE,
        overwrite: bool = False, **options: Any) -> dict[str, Any]:
    """Run a provider over tasks; returns {"report": ..., "path": written file or None}.

    A report whose failed share is above ``max_failure_share`` is still written, marked
    ``"incomplete": true`` (``presdep stability`` refuses it). A report already at the
    target is replaced only with ``overwrite``; else ReportExists before any task is run.
    """
    prov = make_provider(provider, run=run, **options) if provider == "mock" else make_provider(provider, **options)
    if out is not None and not overwrite:
        refuse_existing([report_path(prov.model_id, run, out)])
    report = run_benchmark(prov, tasks, run=run, split=split, max_failure_share=max_failure_share)
    path = write_report(report, out, overwrite=overwrite) if out is not None else None
    return {"report": report, "path": None if path is None else str(path)}


def stability(paths: Iterable[str | os.PathLike], *, seed: int | None = None, resamples: int | None = None,
              svg: str | os.PathLike | None = None, lower_is_better: bool | None = None) -> dict[str, Any]:
    """The stability analysis of run reports (``presdep stability`` on JSON reports)."""
    from presdep.report.stability_svg import write_stability_svg

    res = analyse_reports(list(paths), resamples=DEFAULT_RESAMPLES if resamples is None else resamples,
                          seed=DEFAULT_SEED if seed is None else seed, lower_is_better=lower_is_better)
    if svg is not None:
        write_stability_svg(res, svg)
    return res


def _split_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def provenance(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Where a split comes from: generator, seed, digest, counts."""
    p = Path(path or PUBLIC_PATH)
    tasks = read_split(p)
    public = p.resolve() == PUBLIC_PATH.resolve()
    return {
        "benchmark": BENCHMARK,
        "presdepVersion": __version__,
        "split": "public" if public else p.name,
        "file": p.name,
        "sha256": _split_digest(p),
        "generator": "presdep.bench.suite.generate_split",
        "seed": PUBLIC_SEED if public else None,
        "tasks": len(tasks),
        "items": len({t["item"] for t in tasks}),
        "families": sorted({t["family"] for t in tasks}),
        "variants": sorted({t["variant"] for t in tasks}),
        "grader": "presdep.bench.grader.score_answer (deterministic)",
        "license": "Apache-2.0",
    }


def index_entry(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """A machine-readable description of the benchmark for catalogues and agents."""
    prov = provenance(path)
    return {
        "name": BENCHMARK,
        "version": __version__,
        "description": "Seeded reasoning tasks in six families, each item in five paraphrased prompt "
                       "forms, to measure how a model's score and rank depend on the prompt wording.",
        "task": "prompt sensitivity of reasoning answers",
        "metric": {"name": "accuracy", "higherIsBetter": True, "range": [0, 1]},
        "families": list(FAMILIES),
        "promptVariants": list(VARIANTS),
        "splits": {"public": {"tasks": prov["tasks"], "seed": PUBLIC_SEED, "sha256": prov["sha256"]},
                   "hidden": {"idPrefix": "hid-", "written": "only with an explicit private seed"}},
        "reportFormat": "JSON run report: {model, seed, tasks: [{id, score}], summary}",
        "analysis": "presdep stability REPORT.json ...",
        "providers": ["mock", "openai", "openrouter", "transformers"],
        "interfaces": {"cli": "presdep bench", "http": "presdep bench serve PORT", "mcp": "presdep bench mcp"},
        "license": "Apache-2.0",
    }
