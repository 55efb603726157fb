"""Setting combinations that can only fail after the expensive part of a job, refused at load.

Each check mirrors the code that would fail, so the config is refused before any model work:

- the training loop (presdep.training.loop) evaluates the held-out split at every multiple of
  ``eval_every`` and at the last step, and saves an adapter at every multiple of
  ``checkpoint_every`` and at the last step; lambda selection (presdep.training.select) may pick
  any evaluated step, so an evaluated step that is never saved leaves "the selected checkpoint's
  adapter is missing" once every run has trained;
- the selection rule of a student: ``checkpoint`` (every objective but OC-SFT) takes one lambda;
  ``fixed`` needs ``lambda_fixed`` in the grid; ``one_se`` abstains unless a lambda has two
  evaluations from ``lambda_warmup_steps`` on;
- the objective's views (presdep.training.objectives): OC-SFT compares exactly 2 views; a
  training seed below ``view_seed_base`` would give negative view seeds;
- the reranking threshold (presdep.metrics.thresholds) splits a dataset's queries 50/50, so an
  eval reranking dataset cut to one query fails after every row has scored it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# OC-SFT's consistency term compares views A and B (presdep.training.objectives.OCSFT).
OC_SFT_VIEWS = 2
# one_se abstains when lambda* has fewer converged evaluations (presdep.training.select).
MIN_CONVERGED_EVALUATIONS = 2


def _eval_every(s: Mapping[str, Any]) -> int:
    return s.get("eval_every") or s["checkpoint_every"]  # unset: evaluate where the adapters are saved


def evaluations_from(start: int, steps: int, eval_every: int) -> int:
    """How many held-out evaluations the training loop makes at steps >= ``start`` (multiples of
    ``eval_every``, and the last step)."""
    first = max(start, 1)
    multiples = max(0, steps // eval_every - (first - 1) // eval_every)
    return multiples + (1 if steps % eval_every and steps >= first else 0)


def _schedule_problems(where: str, s: Mapping[str, Any]) -> list[str]:
    steps, every, eval_every = s["steps"], s["checkpoint_every"], _eval_every(s)
    # The last step is always saved, so only an evaluation before it can miss its adapter: the
    # first, eval_every, unless it is a checkpoint step (then so is every multiple of it).
    if eval_every >= steps or eval_every % every == 0:
        return []
    return [f"{where}.eval_every: {eval_every} evaluates step {eval_every}, which {where}.checkpoint_every: "
            f"{every} never saves, so lambda selection could pick an adapter that does not exist; make "
            "eval_every a multiple of checkpoint_every (or checkpoint_every a divisor of eval_every)"]


def _selection_problems(where: str, s: Mapping[str, Any], task: str | None) -> list[str]:
    lam = s["lambda"]
    grid = sorted({float(x) for x in (lam if isinstance(lam, list) else [lam])})
    if s["objective"] != "oc_sft":
        if len(grid) > 1:
            return [f"{where}.lambda: {s['objective']} has no consistency weight; its checkpoint is chosen for "
                    f"one lambda, not a grid of {len(grid)} (give one value)"]
        return []
    rule = s["lambda_rule"].get(task) if task else None
    if rule == "fixed" and float(s["lambda_fixed"]) not in grid:
        return [f"{where}.lambda_fixed: {s['lambda_fixed']} is not in the lambda grid {grid}; the fixed rule "
                f"(lambda_rule.{task}) takes it from the trained lambdas"]
    if rule == "one_se":
        warmup, eval_every = s["lambda_warmup_steps"], _eval_every(s)
        converged = evaluations_from(warmup, s["steps"], eval_every)
        if converged < MIN_CONVERGED_EVALUATIONS:
            return [f"{where}.lambda_warmup_steps: {warmup} leaves {converged} held-out evaluation(s) from "
                    f"the end of the warm-up on (steps {s['steps']}, eval_every {eval_every}); the one_se rule "
                    f"(lambda_rule.{task}) needs {MIN_CONVERGED_EVALUATIONS}: lower lambda_warmup_steps or "
                    "eval_every, or raise steps"]
    return []


def _view_problems(where: str, s: Mapping[str, Any]) -> list[str]:
    out = []
    if s["objective"] == "oc_sft" and s["n_views"] != OC_SFT_VIEWS:
        out.append(f"{where}.n_views: OC-SFT compares exactly {OC_SFT_VIEWS} views (A and B), got {s['n_views']}")
    low = [seed for seed in s["seeds"] if seed < s["view_seed_base"]]
    if low:
        out.append(f"{where}.seeds: {low} are below view_seed_base {s['view_seed_base']}, which would give "
                   "negative view seeds; use seeds >= view_seed_base or lower it")
    return out


def student_problems(name: str, block: Mapping[str, Any], specs: Mapping[str, Any]) -> list[str]:
    """What in one variant's ``student:`` block would fail only once its runs have trained
    (``specs``: the datasets table, whose train dataset's task picks the lambda rule)."""
    where = f"variants.{name}.student"
    train = specs.get(block["train"])
    task = train["task"] if train else None
    return [*_schedule_problems(where, block), *_selection_problems(where, block, task),
            *_view_problems(where, block)]


def feasibility_problems(config: Mapping[str, Any]) -> list[str]:
    """Every combination of the validated ``config`` that could only fail after its expensive work."""
    out = []
    for name, v in config["variants"].items():
        if v.get("student") and not v.get("skip"):
            out += student_problems(name, v["student"], config["datasets"])
    for name, d in config["datasets"].items():
        if d["task"] == "rerank" and d["role"] == "eval" and d.get("max_queries") == 1:
            out.append(f"datasets.{name}.max_queries: 1 query cannot be split 50/50 into the development and "
                       "test halves of the reranking threshold; keep at least 2")
    return out


__all__ = ["MIN_CONVERGED_EVALUATIONS", "OC_SFT_VIEWS", "evaluations_from", "feasibility_problems",
           "student_problems"]
