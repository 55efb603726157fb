"""What a config's jobs cost, per rule and per stage: prompts, tokens, FLOPs and GPU-hours.

Each job's parts (:mod:`presdep.report.plan_work`) are priced on its model's shape
(:mod:`presdep.report.plan_shapes`): FLOPs by the formula of :mod:`presdep.runtime.flops`
at each piece's mean prompt length (a training step x3, x4 checkpointed; the vLLM logprobs path
adds the full-vocabulary head at every position), GPU seconds at the rates of
:mod:`presdep.report.plan_rates` (tokens / rate; generation: steps / steps per second). Only
jobs on a GPU count GPU-hours; CPU jobs, the identity scorer and hosted APIs count none, and
say so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from presdep.config.catalogue import load_catalogue
from presdep.config.catalogue_overrides import with_overrides
from presdep.config.records import WorkflowConfig, thaw
from presdep.report.plan_rates import DECODE_STEPS_PER_S, Rates
from presdep.report.plan_shapes import decode_flops, forward_flops, head_flops_per_token, shape_of
from presdep.report.plan_sizes import dataset_size
from presdep.report.plan_work import STAGES, Job, plan_jobs
from presdep.runtime.flops import TRAIN_FLOPS_PER_FORWARD
from presdep.training.memory_model import ModelShape

Shapes = Callable[[str], tuple[ModelShape | None, str]]
SEP = " | "  # between the rate sources of a row
DECODE_SOURCE = f"assumed: {DECODE_STEPS_PER_S:g} greedy generation steps/s per batch"


@dataclass(frozen=True)
class Cost:
    """One job's model work."""

    prompts_read: int = 0
    prompt_tokens: float = 0.0
    generated_tokens: int = 0
    flops: float = 0.0
    gpu_seconds: float = 0.0
    sources: frozenset[str] = frozenset()
    unknown: str | None = None  # why it could not be priced


def job_cost(job: Job, shapes: Shapes, rates: Rates) -> Cost:
    if not job.parts:
        return Cost()
    if not job.known:
        return Cost(unknown=f"{job.job}: {job.source}")
    shape, where = shapes(job.model) if job.model else (None, "no model")
    reads = sum(p.load.prompts for p in job.parts if p.kind != "decode")
    tokens = sum(p.load.tokens for p in job.parts if p.kind != "decode")
    new = sum(p.load.prompts * p.new_tokens for p in job.parts if p.kind == "decode")
    if shape is None:
        return Cost(reads, tokens, new, unknown=f"{job.job}: {where}")
    flops, seconds, sources = 0.0, 0.0, set()
    for part in job.parts:
        if part.kind == "decode":
            flops += part.load.prompts * decode_flops(shape, part.load.mean_tokens, part.new_tokens)
            seconds += part.steps / DECODE_STEPS_PER_S
            sources.add(DECODE_SOURCE)
            continue
        for prompts, toks in part.load.pieces:
            length = toks / prompts
            if part.kind == "train":
                flops += TRAIN_FLOPS_PER_FORWARD[part.checkpointing] * prompts * forward_flops(shape, length)
                rate, source = rates.train(shape, length, part.checkpointing)
            else:
                flops += prompts * forward_flops(shape, length) + toks * head_flops_per_token(shape, part.path)
                rate, source = rates.readout(part.path, shape, length)
            seconds += toks / rate
            sources.add(source)
    if job.device != "gpu":
        return Cost(reads, tokens, new, flops)
    return Cost(reads, tokens, new, flops, seconds, frozenset(sources))


@dataclass(frozen=True)
class Row:
    """One rule's or one stage's totals."""

    name: str
    stage: str
    jobs: int
    gpu_jobs: int
    prompts: int             # as the code lays them out
    prompts_read: int        # what reaches a model (after the read cache)
    prompt_tokens: float     # of the prompts read
    generated_tokens: int
    flops: float
    gpu_hours: float
    rate_tokens_per_s: float | None  # prompt tokens / GPU seconds, generation included
    rate_source: str
    exact: bool              # every prompt count from candidates files
    source: str
    unknown: tuple[str, ...] = ()

    def as_dict(self, key: str) -> dict:
        out = asdict(self)
        out[key] = out.pop("name")
        out["unknown"] = list(self.unknown)
        return out


def _row(name: str, stage: str, jobs: Sequence[Job], costs: Sequence[Cost]) -> Row:
    gpu = [c for j, c in zip(jobs, costs) if j.device == "gpu" and c.unknown is None]
    seconds = sum(c.gpu_seconds for c in gpu)
    tokens = sum(c.prompt_tokens for c in gpu)
    modelled = [j for j in jobs if j.parts or j.prompts]
    if not any(j.device == "gpu" for j in jobs):
        devices = sorted({j.device for j in jobs})
        rate_source = "CPU only: 0 GPU-hours" if devices == ["cpu"] else \
            f"no GPU jobs ({', '.join(devices)}: {_why(jobs)}): 0 GPU-hours"
    else:
        rate_source = SEP.join(sorted(set().union(*(c.sources for c in gpu)))) or "-"
    exact = all(j.exact for j in modelled)
    bases = Counter(j.basis for j in modelled)
    source = "; ".join(f"{basis} ({n} job{'s' if n > 1 else ''})" for basis, n in sorted(bases.items())) or \
        "no prompts"
    return Row(name, stage, len(jobs), sum(j.device == "gpu" for j in jobs), sum(j.prompts for j in jobs),
               sum(c.prompts_read for c in costs), sum(c.prompt_tokens for c in costs),
               sum(c.generated_tokens for c in costs), sum(c.flops for c in costs), seconds / 3600.0,
               tokens / seconds if seconds else None, rate_source, exact, source,
               tuple(c.unknown for c in costs if c.unknown))


def _why(jobs: Iterable[Job]) -> str:
    return "; ".join(sorted({j.source.split(";")[0] for j in jobs if j.device != "gpu"}))


@dataclass(frozen=True)
class Bill:
    rules: tuple[Row, ...]
    stages: tuple[Row, ...]
    total: Row
    work: tuple[dict, ...]   # every model job with its figures


def plan_bill(cfg: WorkflowConfig, rates: Rates, *, results: str | Path | None = "results",
              resources: str | Path | None = "resources") -> Bill:
    """The bill of ``cfg``: sizes from the candidates files under ``results``, shapes from the
    fetched configs under ``resources`` (None: neither is read, so the figures do not depend on
    what this machine holds)."""
    catalogue = with_overrides(load_catalogue(), thaw(cfg.catalogue_overrides))
    if results is not None and cfg.name:
        results = Path(results) / cfg.name  # rules/common.smk: a named config's RESULTS
    sizes = {name: dataset_size(ds, catalogue, results) for name, ds in cfg.datasets.items()}
    shapes = {m: shape_of(cfg.model(m), m, resources) for m in cfg.models}
    return bill(plan_jobs(cfg, sizes.__getitem__), shapes.__getitem__, rates)


def bill(jobs: Sequence[Job], shapes: Shapes, rates: Rates) -> Bill:
    """Rules (in stage order), stages and the total."""
    costs = [job_cost(j, shapes, rates) for j in jobs]
    by_rule: dict[str, list[int]] = {}
    for i, j in enumerate(jobs):
        by_rule.setdefault(j.rule, []).append(i)
    rules, stages = [], []
    for stage, names in STAGES.items():
        idx = [i for r in names for i in by_rule.get(r, [])]
        rules += [_row(r, stage, [jobs[i] for i in by_rule[r]], [costs[i] for i in by_rule[r]])
                  for r in names if r in by_rule]
        stages.append(_row(stage, stage, [jobs[i] for i in idx], [costs[i] for i in idx]))
    total = _row("total", "all", jobs, costs)
    work = tuple({"rule": j.rule, "job": j.job, "device": j.device, "model": j.model, "prompts": j.prompts,
                  "prompts_read": c.prompts_read, "prompt_tokens": round(c.prompt_tokens),
                  "generated_tokens": c.generated_tokens, "flops": c.flops, "gpu_hours": c.gpu_seconds / 3600.0,
                  "exact": j.exact, "source": j.source, "unknown": c.unknown}
                 for j, c in zip(jobs, costs) if j.parts or j.prompts)
    return Bill(tuple(rules), tuple(stages), total, work)


# ---------------------------------------------------------------- text


def num(x: Any) -> str:
    """Counts with thousands separators, big figures in engineering form (3.4e9), hours to 0.1."""
    if x is None:
        return "-"
    if isinstance(x, float) and abs(x) >= 1e7:
        return f"{x:.2e}".replace("e+0", "e").replace("e+", "e")
    if isinstance(x, float):
        return f"{x:,.1f}"
    return f"{x:,}"


COLUMNS = ("jobs", "GPU jobs", "prompts", "inputs read", "prompt tokens", "FLOPs", "GPU-hours", "tokens/s", "rate")


def _big(x: float) -> str:
    return num(float(x)) if x >= 1e7 else num(round(x))


def cells(row: Row, legend: Mapping[str, int]) -> tuple[str, ...]:
    refs = sorted(legend[s] for s in row.rate_source.split(SEP) if s in legend)
    rate = ", ".join(f"[{i}]" for i in refs) or row.rate_source
    return (num(row.jobs), num(row.gpu_jobs), num(row.prompts), num(row.prompts_read), _big(row.prompt_tokens),
            _big(row.flops), num(row.gpu_hours), num(round(row.rate_tokens_per_s)) if row.rate_tokens_per_s
            else "-", rate)


def legend_of(rows: Iterable[Row]) -> dict[str, int]:
    """Each distinct rate source, numbered."""
    seen: dict[str, int] = {}
    for row in rows:
        for s in row.rate_source.split(SEP):
            if row.gpu_jobs and s and s != "-":
                seen.setdefault(s, len(seen) + 1)
    return seen


def fixed_width(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def fmt(r):
        return "  ".join(c.ljust(w) if i in (0, len(head) - 1) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([fmt(head), fmt(tuple("-" * w for w in widths)), *(fmt(r) for r in rows)]).rstrip()


def format_bill(b: Bill, assumed: Sequence[str]) -> str:
    """Per-stage and per-rule tables with a total line, then the rate sources and assumptions."""
    legend = legend_of([*b.rules, *b.stages])
    stage_rows = [(s.name, *cells(s, legend)) for s in b.stages] + [("total", *cells(b.total, legend))]
    rule_rows = [(f"{r.stage}/{r.name}", *cells(r, legend)) for r in b.rules] + [("total", *cells(b.total, legend))]
    out = [fixed_width(("stage", *COLUMNS), stage_rows), "", fixed_width(("rule", *COLUMNS), rule_rows), "",
           "rates:", *(f"  [{i}] {s}" for s, i in legend.items()), "assumed:", *(f"  {a}" for a in assumed)]
    unknown = [u for r in b.rules for u in r.unknown]
    if unknown:
        out += [f"not counted ({len(unknown)} job(s) with no size or no model shape):",
                *(f"  {u}" for u in unknown[:10]), *(["  ..."] if len(unknown) > 10 else [])]
    return "\n".join(out)


__all__ = ["Bill", "Cost", "Row", "bill", "plan_bill", "cells", "format_bill", "job_cost", "legend_of", "num"]
