"""Leaderboard ranks under each presentation, or each prompt variant, taken alone.

``presentationSensitivity`` and ``promptSensitivity`` of the stability JSON
(presdep.report.stability_analysis documents the layout): per presentation (prompt
variant) the variants' means, their ranks (1 = best, ties averaged) and each variant's
rank range over presentations (prompt variants).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import polars as pl

from presdep.contracts.errors import StabilityError
from presdep.report.bootstrap import json_float, ranks, tie_score


def _per_presentation_rows(per_presentation: pl.DataFrame, variants: Iterable[str] | None, where: str) -> pl.DataFrame:
    """Typed non-null rows of the wanted variants; refuses missing columns, variants, duplicates."""
    need = {"variant", "seed", "query_id", "presentation", "value"}
    missing = sorted(need - set(per_presentation.columns))
    if missing:
        raise StabilityError(f"{where}: lacks column(s) {missing}; expected {sorted(need)}")
    df = per_presentation.select(
        (pl.col("dataset") if "dataset" in per_presentation.columns else pl.lit("all")).cast(pl.String).alias("dataset"),
        pl.col("variant").cast(pl.String),
        pl.col("seed").cast(pl.Int64),
        pl.col("query_id").cast(pl.String),
        pl.col("presentation").cast(pl.Int64),
        pl.col("value").cast(pl.Float64),
    ).filter(pl.col("value").is_not_null())
    if variants is not None:
        wanted = list(variants)
        df = df.filter(pl.col("variant").is_in(wanted))
        absent = sorted(set(wanted) - set(df["variant"].unique().to_list()))
        if absent:
            raise StabilityError(f"{where}: no per-presentation values for variant(s) {absent}")
    if df.height == 0:
        raise StabilityError(f"{where}: no per-presentation rows")
    dup = df.select("dataset", "variant", "seed", "query_id", "presentation").is_duplicated()
    if dup.any():
        raise StabilityError(f"{where}: duplicate row {df.row(int(dup.arg_max()), named=True)}")
    return df


def _mean_matrix(means: pl.DataFrame, key: str, keys: list, names: list[str]) -> np.ndarray:
    """(keys, variants) matrix of ``means`` (columns variant, ``key``, value); nan where absent."""
    mat = np.full((len(keys), len(names)), np.nan)
    k_pos, v_pos = {k: i for i, k in enumerate(keys)}, {v: i for i, v in enumerate(names)}
    for row in means.iter_rows(named=True):
        mat[k_pos[row[key]], v_pos[row["variant"]]] = row["value"]
    return mat


def _rank_ranges(rk: np.ndarray, names: list[str]) -> dict[str, Any]:
    return {
        "rankRange": {v: [json_float(rk[:, j].min()), json_float(rk[:, j].max())] for j, v in enumerate(names)},
        "rankSpread": {v: json_float(rk[:, j].max() - rk[:, j].min()) for j, v in enumerate(names)},
    }


def presentation_sensitivity(
    per_presentation: pl.DataFrame,
    *,
    lower_is_better: bool,
    variants: Iterable[str] | None = None,
    where: str = "per-presentation values",
) -> dict[str, Any]:
    """Rank the variants under each presentation separately; report each one's rank range.

    ``per_presentation``: columns variant, seed, query_id, presentation, value
    (dataset optional). Only queries present in every (variant, seed, presentation)
    cell count; seeds are averaged per variant, datasets weigh equally.
    """
    df = _per_presentation_rows(per_presentation, variants, where)
    presentations = sorted(df["presentation"].unique().to_list())
    cells = df.select("variant", "seed").unique().height * len(presentations)
    shared = (
        df.group_by("dataset", "query_id")
        .agg(pl.struct("variant", "seed", "presentation").n_unique().alias("n"))
        .filter(pl.col("n") == cells)
        .select("dataset", "query_id")
    )
    if shared.height == 0:
        raise StabilityError(f"{where}: no query has a value in every (variant, seed, presentation) cell")
    means = (
        df.join(shared, on=["dataset", "query_id"], how="semi")
        .group_by("dataset", "variant", "seed", "presentation")
        .agg(pl.col("value").mean())
        .group_by("variant", "seed", "presentation")
        .agg(pl.col("value").mean())  # equal dataset weight
        .group_by("variant", "presentation")
        .agg(pl.col("value").mean())  # mean over seeds
    )
    names = sorted(means["variant"].unique().to_list())
    rk = ranks(tie_score(_mean_matrix(means, "presentation", presentations, names), lower_is_better))
    return {
        "presentations": [int(p) for p in presentations],
        "sharedItems": int(shared.height),
        "ranks": {v: {str(p): json_float(rk[i, j]) for i, p in enumerate(presentations)} for j, v in enumerate(names)},
        **_rank_ranges(rk, names),
    }


def prompt_sensitivity(
    rows: pl.DataFrame, *, lower_is_better: bool, variants: Iterable[str]
) -> dict[str, Any] | None:
    """Rank the models on each prompt variant alone; report each model's rank range.

    ``rows``: the shared rows (dataset, variant, seed, query_id, value, prompt_variant).
    Per prompt variant: each run's mean over its rows (datasets weigh equally), then the
    mean over a model's runs. None when no row has a prompt variant.
    """
    df = rows.filter(pl.col("prompt_variant").is_not_null() & pl.col("variant").is_in(list(variants)))
    if df.height == 0:
        return None
    means = (
        df.group_by("dataset", "variant", "seed", "prompt_variant").agg(pl.col("value").mean())
        .group_by("variant", "seed", "prompt_variant").agg(pl.col("value").mean())
        .group_by("variant", "prompt_variant").agg(pl.col("value").mean())
    )
    pvs = sorted(df["prompt_variant"].unique().to_list(), key=lambda v: (len(v), v))
    names = sorted(means["variant"].unique().to_list())
    mat = _mean_matrix(means, "prompt_variant", pvs, names)
    rk = ranks(tie_score(mat, lower_is_better))
    counts = dict(df.filter(pl.col("variant") == names[0]).group_by("prompt_variant")
                  .agg(pl.struct("dataset", "query_id").n_unique().alias("n")).iter_rows())
    return {
        "promptVariants": pvs,
        "sharedItems": {p: int(counts.get(p, 0)) for p in pvs},
        "ranking": {p: [names[j] for j in sorted(range(len(names)), key=lambda j: (rk[i, j], names[j]))]
                    for i, p in enumerate(pvs)},
        "mean": {v: {p: json_float(mat[i, j]) for i, p in enumerate(pvs)} for j, v in enumerate(names)},
        "ranks": {v: {p: json_float(rk[i, j]) for i, p in enumerate(pvs)} for j, v in enumerate(names)},
        **_rank_ranges(rk, names),
    }
