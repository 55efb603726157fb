"""Choosing the checkpoint and lambda of a trained variant on the held-out split (never on test data).

Every training run (one lambda, one seed) records, at each evaluation step, the
per-query held-out nDCG@10 (``heldout.parquet``) and the standard deviation of the
student's held-out scores (``done.json``, ``heldout_score_std``). Rules:

- ``checkpoint`` (objectives without lambda): per seed, the argmax of held-out
  nDCG@10 over its evaluations, exact ties to the earliest step.
- ``one_se`` (reranking), per training seed over the lambda grid:
  (1) collapse: a candidate whose score standard deviation at any evaluation is
  below ``collapse_floor`` is excluded; (2) only evaluations at steps >=
  ``converged_step`` (the end of the lambda warm-up) count, and a candidate's value
  is its best converged evaluation (earliest on ties); a candidate without one is
  missing; (3) the band = candidates whose value is within one standard error of the
  best value (the standard error over held-out queries of the best candidate's
  per-query nDCG@10 at its best checkpoint); lambda* = the LARGEST lambda in the
  band, at its own best checkpoint; (4) the decision records lambda*, its step and
  value, the argmax, the band, the collapsed and missing candidates and warnings
  (grid flatter than the band, band spanning the whole grid, lambda* on the grid
  boundary, fewer than 3 converged evaluations, best held-out quality below 0.40).
  It abstains (:class:`SelectionAbstained`) when fewer than half the candidates are
  usable or lambda* has fewer than 2 converged evaluations.
- ``seed_mean`` (QA): each seed's run at its best checkpoint; lambda = the argmax
  of the mean over training seeds of those values (ties to the larger lambda).
- ``fixed`` (responses): lambda = ``fixed_lambda`` (fixed a priori), each seed at
  its best checkpoint.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from presdep import __version__
from presdep.contracts.errors import InvalidInput, PresdepError, cut
from presdep.contracts.json_artifacts import read_json_artifact, write_json_artifact

RULES = ("checkpoint", "one_se", "seed_mean", "fixed")
MIN_QUALITY = 0.40  # a best held-out nDCG@10 below this is flagged
RULE_TEXT = {
    "checkpoint": "per seed: held-out nDCG@10 argmax over evaluations, exact ties to the earliest step",
    "one_se": ("per seed: collapsed candidates excluded, converged evaluations only; band = within one standard "
               "error of the best; lambda* = largest lambda in the band at its own best checkpoint"),
    "seed_mean": "lambda with the best mean over training seeds of held-out nDCG@10 (each seed at its best checkpoint)",
    "fixed": "lambda fixed a priori; each seed at its best checkpoint",
}


class SelectionAbstained(PresdepError, ValueError):
    """The held-out evidence does not support choosing a lambda."""


@dataclass(frozen=True)
class RunEvals:
    """The held-out evaluations of one training run."""

    dir: Path
    per_query: dict[int, dict[str, float]]  # step -> query -> nDCG@10
    score_std: dict[int, float]  # step -> standard deviation of the student's held-out scores

    def mean(self, step: int) -> float:
        return float(np.mean(list(self.per_query[step].values())))

    @property
    def steps(self) -> list[int]:
        return sorted(self.per_query)


def read_run(run_dir: str | os.PathLike) -> RunEvals:
    """The evaluations a training run wrote (``heldout.parquet`` and ``done.json``)."""
    d = Path(run_dir)
    path, done_path = d / "heldout.parquet", d / "done.json"
    for p in (path, done_path):
        if not p.exists():
            raise FileNotFoundError(f"{p}: the training run has no held-out evaluation (set heldout data)")
    per_query: dict[int, dict[str, float]] = {}
    for step, q, v in pl.read_parquet(path).select("step", "query_id", "ndcg10").iter_rows():
        if v is None or math.isnan(v):
            raise InvalidInput(f"{path}: step {step}, query {q}: nDCG@10 is missing")
        per_query.setdefault(int(step), {})[str(q)] = float(v)
    if not per_query:
        raise InvalidInput(f"{path}: no held-out evaluations recorded")
    std = _score_spread(done_path, read_json_artifact(done_path, "training run record"))
    lacking = sorted(set(per_query) - set(std))
    if lacking:
        raise InvalidInput(f"{done_path}: no held-out score spread (heldout_score_std) for steps {lacking}")
    return RunEvals(d, per_query, std)


def _score_spread(done_path: Path, done: Mapping[str, Any]) -> dict[int, float]:
    """``heldout_score_std`` of a run record: step -> spread (a file lacking it records none)."""
    raw = done.get("heldout_score_std", {})
    if not isinstance(raw, dict):
        raise InvalidInput(f"{done_path}: heldout_score_std must map steps to numbers, got {cut(raw)}")
    std = {}
    for k, v in raw.items():
        if not k.isdigit() or isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidInput(f"{done_path}: heldout_score_std entry {cut(k)}: {cut(v)} is not step -> number")
        std[int(k)] = float(v)
    return std


def best_checkpoint(run: RunEvals, from_step: int = 0) -> tuple[int, float] | None:
    """(step, mean nDCG@10) of the best evaluation at steps >= ``from_step``; exact ties to the earliest."""
    steps = [s for s in run.steps if s >= from_step]
    if not steps:
        return None
    best = max(run.mean(s) for s in steps)
    step = min(s for s in steps if run.mean(s) == best)
    return step, best


def standard_error(values: Sequence[float]) -> float:
    v = np.asarray(values, dtype=float)
    return float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0


def one_se_decision(
    grid: Mapping[float, RunEvals | None], *, converged_step: int, collapse_floor: float,
    min_quality: float = MIN_QUALITY,
) -> dict:
    """The one-standard-error rule over one seed's lambda grid (None = the run is missing)."""
    lams = sorted(grid)
    if not lams:
        raise InvalidInput("one_se: empty lambda grid")
    collapsed, missing, usable = [], [], {}
    for lam in lams:
        run = grid[lam]
        if run is None:
            missing.append(lam)
            continue
        min_std = min(run.score_std.values())
        if min_std < collapse_floor:
            collapsed.append(lam)
            continue
        best = best_checkpoint(run, converged_step)
        if best is None:
            missing.append(lam)
            continue
        step, value = best
        usable[lam] = {"lambda": lam, "step": step, "value": value, "min_score_std": min_std,
                       "n_converged": sum(1 for s in run.steps if s >= converged_step),
                       "se": standard_error(list(run.per_query[step].values()))}
    base = {"collapsed": collapsed, "missing": missing, "candidates": list(usable.values()),
            "converged_step": converged_step, "collapse_floor": collapse_floor}
    if 2 * len(usable) < len(lams):
        raise SelectionAbstained(f"one_se: only {len(usable)} of {len(lams)} lambda candidates are usable "
                                 f"(collapsed {collapsed}, missing {missing}); abstaining")
    top = max(usable.values(), key=lambda c: (c["value"], c["lambda"]))
    se = top["se"]
    band = [lam for lam, c in usable.items() if c["value"] >= top["value"] - se]
    star = usable[max(band)]
    if star["n_converged"] < 2:
        raise SelectionAbstained(f"one_se: lambda* = {star['lambda']} has {star['n_converged']} converged "
                                 f"evaluation(s), fewer than 2; abstaining")
    values = [c["value"] for c in usable.values()]
    warnings = []
    if len(values) > 1 and max(values) - min(values) < se:
        warnings.append("grid flatter than the band")
    if len(lams) > 1 and min(lams) in band and max(lams) in band:
        warnings.append("band spanning the whole grid")
    if star["lambda"] in (min(lams), max(lams)):
        warnings.append("lambda* on the grid boundary")
    if star["n_converged"] < 3:
        warnings.append("fewer than 3 converged evaluations")
    if top["value"] < min_quality:
        warnings.append(f"best held-out quality below {min_quality:.2f}")
    return {**base, "lambda": star["lambda"], "step": star["step"], "value": star["value"],
            "argmax": {"lambda": top["lambda"], "step": top["step"], "value": top["value"], "se": se},
            "band": sorted(band), "warnings": warnings}


def _adapter(run_dir: Path, step: int) -> str:
    a = Path(run_dir) / "checkpoints" / f"step{step:06d}" / "adapter"
    if not (a / "adapter_config.json").exists():
        raise FileNotFoundError(f"{a}: the selected checkpoint's adapter is missing")
    return str(a)


def select_lambda(
    runs: Sequence[Mapping[str, Any]], *, rule: str, converged_step: int = 0, collapse_floor: float = 0.0,
    fixed_lambda: float | None = None, task: str | None = None,
) -> dict:
    """``runs``: [{"lambda": float, "seed": int, "dir": path}, ...]. Returns the selection record."""
    if rule not in RULES:
        raise InvalidInput(f"unknown lambda rule {rule!r}; expected one of {RULES}")
    if not runs:
        raise InvalidInput("select_lambda needs at least one training run")
    table: dict[int, dict[float, Path]] = {}
    for r in runs:
        seed, lam = int(r["seed"]), float(r["lambda"])
        if lam in table.setdefault(seed, {}):
            raise InvalidInput(f"two runs for seed {seed}, lambda {lam}")
        table[seed][lam] = Path(r["dir"])
    grid = sorted({lam for by in table.values() for lam in by})
    for seed, by in table.items():
        if sorted(by) != grid:
            raise InvalidInput(f"seed {seed} has runs for lambdas {sorted(by)}, the grid is {grid}")
    seeds = sorted(table)
    chosen: dict[int, tuple[float, int, float]] = {}  # seed -> (lambda, step, value)
    extra: dict[str, Any] = {}
    if rule == "one_se":
        decisions = {}
        for seed in seeds:
            evals = {lam: (read_run(d) if (d / "done.json").exists() else None) for lam, d in table[seed].items()}
            dec = one_se_decision(evals, converged_step=converged_step, collapse_floor=collapse_floor)
            decisions[str(seed)] = dec
            chosen[seed] = (dec["lambda"], dec["step"], dec["value"])
        extra["decisions"] = decisions
    else:
        best = {(seed, lam): best_checkpoint(read_run(d)) for seed in seeds for lam, d in table[seed].items()}
        if rule == "checkpoint":
            if len(grid) != 1:
                raise InvalidInput(f"rule 'checkpoint' takes one lambda, the grid is {grid}")
            lam = grid[0]
        elif rule == "fixed":
            if fixed_lambda is None or float(fixed_lambda) not in grid:
                raise InvalidInput(f"rule 'fixed': lambda_fixed = {fixed_lambda} is not among the trained lambdas {grid}")
            lam = float(fixed_lambda)
        else:  # seed_mean
            means = {lam: float(np.mean([best[(s, lam)][1] for s in seeds])) for lam in grid}
            lam = max(grid, key=lambda x: (means[x], x))
            extra["seed_means"] = {f"{k:g}": v for k, v in means.items()}
        for seed in seeds:
            step, value = best[(seed, lam)]
            chosen[seed] = (lam, step, value)
        extra["candidates"] = [{"seed": s, "lambda": x, "step": best[(s, x)][0], "value": best[(s, x)][1]}
                               for s in seeds for x in grid]
    lams = {c[0] for c in chosen.values()}
    return {
        "presdep_version": __version__,
        "task": task,
        "rule": rule,
        "rule_text": RULE_TEXT[rule],
        "grid": grid,
        "lambda": lams.pop() if len(lams) == 1 else None,
        "per_seed": {str(s): {"lambda": c[0], "step": c[1], "heldout_ndcg10": c[2]} for s, c in chosen.items()},
        "adapters": {str(s): _adapter(table[s][c[0]], c[1]) for s, c in chosen.items()},
        "test_data_used": False,
        **extra,
    }


def select_lambda_files(*, runs: Sequence[Mapping[str, Any]], out_path: str | os.PathLike, rule: str,
                        converged_step: int = 0, collapse_floor: float = 0.0, fixed_lambda: float | None = None,
                        task: str | None = None, params: Mapping[str, Any] | None = None) -> dict:
    rec = select_lambda(runs, rule=rule, converged_step=converged_step, collapse_floor=collapse_floor,
                        fixed_lambda=fixed_lambda, task=task)
    rec["params"] = dict(params or {})
    write_json_artifact(out_path, rec)  # with its digest: scoring verifies it (presdep.contracts.selection)
    return rec


__all__ = ["RULES", "RULE_TEXT", "MIN_QUALITY", "SelectionAbstained", "RunEvals", "read_run", "best_checkpoint",
           "standard_error", "one_se_decision", "select_lambda", "select_lambda_files"]
