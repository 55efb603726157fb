"""lambda selection on the held-out split (never on test data).

Each training run writes ``heldout.parquet`` (step, query_id, ndcg10) at its
checkpoints. For every (lambda, checkpoint step) the per-query nDCG@10 is averaged
over the training seeds, then over queries. Per lambda, its best value and the
earliest checkpoint reaching it. The rule: among all lambdas, take the LARGEST
whose best held-out nDCG@10 is within one standard error of the overall best
(the standard error of the overall best's per-query values), at its earliest best
checkpoint. The result names one adapter per seed.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from presdep import __version__
from presdep.schemas import write_text_atomic

RULE = ("largest lambda whose held-out nDCG@10 is within one standard error of the best, "
        "at its earliest best checkpoint (held-out split only)")


def _curve(run_dirs: Sequence[Path]) -> dict[int, np.ndarray]:
    """step -> per-query nDCG averaged over seeds (queries and steps common to all seeds)."""
    frames = []
    for i, d in enumerate(run_dirs):
        path = Path(d) / "heldout.parquet"
        if not path.exists():
            raise FileNotFoundError(f"{path}: training run has no held-out evaluation (set heldout data)")
        df = pl.read_parquet(path)
        if df.height == 0:
            raise ValueError(f"{path}: no held-out evaluations recorded")
        frames.append(df.with_columns(pl.lit(i).alias("run")))
    df = pl.concat(frames)
    n_runs = len(run_dirs)
    common = df.group_by("step", "query_id").agg(pl.len().alias("n"), pl.col("ndcg10").mean()).filter(pl.col("n") == n_runs)
    out = {}
    for (step,), g in common.sort("query_id").group_by("step"):
        out[int(step)] = g.sort("query_id")["ndcg10"].to_numpy()
    if not out:
        raise ValueError(f"no checkpoint step is evaluated in all {n_runs} seed runs of {run_dirs}")
    return dict(sorted(out.items()))


def select_lambda(runs: Sequence[Mapping[str, Any]], *, tol: float = 1e-12) -> dict:
    """``runs``: [{"lambda": float, "seed": int, "dir": path}, ...]. Returns the selection record."""
    if not runs:
        raise ValueError("select_lambda needs at least one training run")
    by_lam: dict[float, list[Mapping[str, Any]]] = {}
    for r in runs:
        by_lam.setdefault(float(r["lambda"]), []).append(r)
    table = []
    for lam in sorted(by_lam):
        dirs = [Path(r["dir"]) for r in sorted(by_lam[lam], key=lambda r: int(r["seed"]))]
        curve = _curve(dirs)
        means = {s: float(v.mean()) for s, v in curve.items()}
        best = max(means.values())
        best_step = min(s for s, m in means.items() if m >= best - tol)
        v = curve[best_step]
        se = float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0
        table.append({"lambda": lam, "best_ndcg10": best, "best_step": best_step, "se": se, "n_queries": int(len(v)),
                      "curve": {str(s): m for s, m in means.items()}})
    top = max(table, key=lambda r: (r["best_ndcg10"], -r["lambda"]))
    threshold = top["best_ndcg10"] - top["se"]
    chosen = max((r for r in table if r["best_ndcg10"] >= threshold - tol), key=lambda r: r["lambda"])
    step = chosen["best_step"]
    adapters = {}
    for r in by_lam[chosen["lambda"]]:
        a = Path(r["dir"]) / "checkpoints" / f"step{step:06d}" / "adapter"
        if not (a / "adapter_config.json").exists():
            raise FileNotFoundError(f"{a}: the selected checkpoint's adapter is missing")
        adapters[str(int(r["seed"]))] = str(a)
    return {
        "presdep_version": __version__,
        "rule": RULE,
        "lambda": chosen["lambda"],
        "step": step,
        "heldout_ndcg10": chosen["best_ndcg10"],
        "best": {"lambda": top["lambda"], "ndcg10": top["best_ndcg10"], "se": top["se"], "threshold": threshold},
        "adapters": adapters,
        "candidates": table,
        "test_data_used": False,
    }


def select_lambda_files(*, runs: Sequence[Mapping[str, Any]], out_path: str | os.PathLike,
                        params: Mapping[str, Any] | None = None) -> dict:
    rec = select_lambda(runs)
    rec["params"] = dict(params or {})
    write_text_atomic(out_path, json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def adapter_for(selected_json: str | os.PathLike, seed: int) -> str:
    """The adapter directory the selection names for a training seed."""
    rec = json.loads(Path(selected_json).read_text())
    try:
        return rec["adapters"][str(int(seed))]
    except KeyError:
        raise KeyError(f"{selected_json}: no adapter for seed {seed}; have {sorted(rec['adapters'])}") from None


__all__ = ["RULE", "select_lambda", "select_lambda_files", "adapter_for"]
