"""The stability analysis' files: metrics Parquet and JSON run reports in, JSON and SVG out.

The analyses themselves (no I/O) are in presdep.report.stability_analysis; the JSON
layout is documented there. The JSON is written with a content digest
(presdep.contracts.json_artifacts) and :func:`read_stability_json` verifies it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import polars as pl

from presdep.contracts.errors import StabilityError
from presdep.contracts.json_artifacts import read_json_artifact, write_json_artifact
from presdep.contracts.schemas import read_table
from presdep.report.bootstrap import DEFAULT_LEVEL, DEFAULT_RESAMPLES, DEFAULT_SEED
from presdep.report.run_reports import prompt_variant, reports_frame
from presdep.report.stability_analysis import analyse_table1, paired_bootstrap


def read_metrics(paths: Iterable[str | os.PathLike]) -> pl.DataFrame:
    """Concatenate validated metrics Parquet files."""
    paths = list(paths)
    frames = [read_table(p, "metrics") for p in paths]
    if not frames:
        raise StabilityError("no metrics files given")
    df = pl.concat(frames, how="vertical")
    dup = df.select("dataset", "task", "variant", "seed", "perturbation", "query_id", "metric").is_duplicated()
    if dup.any():
        raise StabilityError(f"metrics files {list(map(str, paths))}: duplicate row {df.row(int(dup.arg_max()), named=True)}")
    return df


def analyse_reports(
    paths: Iterable[str | os.PathLike],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    lower_is_better: bool | None = None,
    label: str = "report",
    per_presentation: pl.DataFrame | None = None,
    level: float = DEFAULT_LEVEL,
) -> dict[str, Any]:
    """Bootstrap JSON run reports; the direction comes from the reports unless given; ``level`` is the
    tiers' (rankUB, tier)."""
    frame, higher = reports_frame(paths)
    if higher is True and lower_is_better:
        raise StabilityError("lower-is-better contradicts the reports, which state higherIsBetter: true")
    lower = bool(lower_is_better) or higher is False
    pv = frame.select("dataset", "query_id").unique().with_columns(
        pl.col("query_id").map_elements(prompt_variant, return_dtype=pl.String).alias("prompt_variant"))
    res = paired_bootstrap(frame, lower_is_better=lower, resamples=resamples, seed=seed,
                           per_presentation=per_presentation,
                           prompt_variants=pv if pv["prompt_variant"].is_not_null().any() else None,
                           where="reports", level=level)
    head = {"column": label, "task": None, "metric": None, "perturbation": None,
            "direction": "lower" if lower else "higher"}
    return {**head, **res, "flagged": {}}  # run reports carry no degenerate-decision flags


def write_stability_json(result: Mapping[str, Any], path: str | os.PathLike) -> Path:
    return write_json_artifact(path, result)


def read_stability_json(path: str | os.PathLike) -> dict[str, Any]:
    """A stability result as written, verified against its digest (SchemaError naming the file if not)."""
    return read_json_artifact(path, "stability result")


def permutation_warning(datasets: Sequence[str]) -> str:
    """Why a query bootstrap cannot see which permutations were drawn where queries share them."""
    return (f"intervals resample queries, not the M slot permutations every query of {', '.join(datasets)} "
            "shares (shuffle_rule paper/cyclic): they are conditional on those permutations "
            "(protocol.shuffle_rule: per_query draws them per query)")


def write_table1_stability(
    metrics_paths: Iterable[str | os.PathLike],
    json_path: str | os.PathLike,
    svg_dir: str | os.PathLike,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    labels: Mapping[str, str] | None = None,
    level: float = DEFAULT_LEVEL,
    shared_permutations: Sequence[str] = (),
) -> dict[str, Any]:
    """The workflow step: metrics files -> table1.json + one ``<column>.svg`` per analysed column
    (variants shown by their Table 1 ``labels``; the JSON keeps the variant names).
    ``shared_permutations``: the datasets whose queries share their M slot permutations; each
    column's warnings then say its intervals are conditional on them."""
    from presdep.report.stability_svg import write_stability_svg  # matplotlib only when drawing

    metrics_paths = list(metrics_paths)
    result = analyse_table1(read_metrics(metrics_paths), resamples=resamples, seed=seed, level=level)
    if shared_permutations:
        for res in result["columns"].values():
            res["warnings"].append(permutation_warning(shared_permutations))
    svg_dir = Path(svg_dir)
    svg_dir.mkdir(parents=True, exist_ok=True)
    for column, res in result["columns"].items():
        write_stability_svg(res, svg_dir / f"{column}.svg", labels=labels)
    write_stability_json(result, json_path)
    return result
