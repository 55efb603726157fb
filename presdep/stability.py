"""Statistical stability of the Table 1 leaderboard: paired bootstrap rank intervals.

Method (docs/stability.md):

* Per-query values come from ``metrics`` rows with a non-null ``query_id``. A query
  enters only if EVERY run (variant x seed) has a non-null value for it; the others
  are dropped and counted (``droppedItems``).
* Paired bootstrap: every resample draws ONE set of query indices used for every
  variant. With several datasets it is hierarchical: datasets are drawn with
  replacement, then queries within each drawn dataset (each drawn copy gets its own
  query draw); a resample's value is the unweighted mean of its dataset means, so
  every dataset weighs the same whatever its size. Items sharing a ``cluster``
  (e.g. the ``-vN`` variants of one task in a JSON run report) are drawn together.
* Variants with several runs (training seeds, repeated report runs): each resample
  draws one run per variant, so seed variation widens the intervals. The point
  estimate ``mean`` is the mean over runs of the dataset-weighted mean.
* Ranks: 1 = best; lower-is-better columns rank ascending. Ties (values equal to
  12 decimals, so that float noise does not break exact ties) get average ranks and
  split ``probabilityFirst``.

JSON layout written by :func:`write_stability_json` (``results/stability/table1.json``)::

    {
      "presdepVersion": "0.1.0",
      "columns": {
        "<column>": {                       # e.g. "rerank_tau_psi"
          "column", "task", "metric", "perturbation": str,
          "direction": "higher" | "lower",  # which values are better
          "resamples": int, "seed": int,
          "datasets": [str],
          "sharedItems": int,               # resampled items: -vN variants of a task count once
          "sharedItemsPerDataset": {dataset: int},
          "sharedClusters": int,            # = sharedItems (older name)
          "sharedRows": int, "sharedRowsPerDataset": {dataset: int},  # task rows (every -vN row)
          "droppedItems": int,              # rows not shared by every run
          "runsPerVariant": {variant: int},
          "variants": [variant, ...],       # ordered by full-sample rank (best first)
          "mean": {variant: float},         # full-sample point estimate
          "meanInterval95": {variant: [lo, hi]},   # percentile interval of the mean
          "rank": {variant: float},         # full-sample rank (average for ties)
          "probabilityFirst": {variant: float},
          "rankInterval95": {variant: [lo, hi]},   # percentile interval of the rank
          "rankDistribution": {variant: {"<rank>": probability}},
          "meanKendallTau": float | null,   # mean tau-b(full-sample ranking, resampled ranking)
          "pairwise": {a: {b: {"probabilityBetter": P(a better than b), ties split,
                               "difference": mean_a - mean_b,
                               "differenceInterval95": [lo, hi]}}},
          "presentationSensitivity": null | {
              "presentations": [int], "sharedItems": int,
              "ranks": {variant: {"<presentation>": rank}},
              "rankRange": {variant: [min rank, max rank]},
              "rankSpread": {variant: max - min}},
          "presentationSensitivityReason": str | null,   # why it is null
          "promptSensitivity": null | {     # report input whose task ids end in -vN
              "promptVariants": ["v1", ...], "sharedItems": {"v1": rows},
              "ranking": {"v1": [variant, ...]},          # best first, on that prompt variant alone
              "mean": {variant: {"v1": float}},
              "ranks": {variant: {"v1": rank}},
              "rankRange": {variant: [min rank, max rank]},
              "rankSpread": {variant: max - min}},
          "promptSensitivityReason": str | null,
          "warnings": [str]
        }
      },
      "skipped": {"<column>": "reason"}    # Table 1 columns without per-query rows
    }
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import polars as pl
from scipy.stats import rankdata

from presdep import __version__

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 4401
MIN_SHARED_ITEMS = 30
MIN_RESAMPLES = 500
# Resamples processed at once: bounds memory (block x clusters weights) for 20,000 resamples.
_BLOCK = 1000
_TIE_DECIMALS = 12


from presdep.columns import TABLE1_COLUMNS, Table1Column  # noqa: E402,F401 - re-exported

NO_PROMPT_VARIANT_REASON = "no task id carries a prompt-variant suffix (-v1, -v2, ...)"
NO_PRESENTATION_REASON = (
    "no per-presentation input given: the metrics contract stores per-query values "
    "already averaged over presentations"
)


class StabilityError(ValueError):
    """Input to the stability analysis is unusable; the message says which and why."""


# ----------------------------------------------------------------------------- input


def column_values(metrics: pl.DataFrame, column: str, where: str = "metrics") -> pl.DataFrame:
    """Per-query rows of one Table 1 column: dataset, variant, seed, query_id, value."""
    if column not in TABLE1_COLUMNS:
        raise StabilityError(f"{where}: unknown Table 1 column {column!r}; known: {list(TABLE1_COLUMNS)}")
    spec = TABLE1_COLUMNS[column]
    need = {"dataset", "task", "variant", "seed", "perturbation", "query_id", "metric", "value"}
    missing = sorted(need - set(metrics.columns))
    if missing:
        raise StabilityError(f"{where}: metrics table lacks column(s) {missing}")
    return metrics.filter(
        (pl.col("task") == spec.task)
        & (pl.col("metric") == spec.metric)
        & (pl.col("perturbation") == spec.perturbation)
        & pl.col("query_id").is_not_null()
    ).select("dataset", "variant", "seed", "query_id", "value")


@dataclass
class _Prepared:
    variants: list[str]  # sorted names
    runs: list[tuple[str, Any]]  # (variant, seed) per run column
    variant_runs: list[np.ndarray]  # run column indices per variant
    datasets: list[str]
    sums: list[np.ndarray]  # per dataset: (clusters, runs) sums of item values
    counts: list[np.ndarray]  # per dataset: (clusters,) item counts
    items_per_dataset: dict[str, int]  # task rows
    shared_rows: pl.DataFrame  # per-row input restricted to rows shared by every run
    dropped: int
    excluded_variants: list[str]
    dropped_datasets: list[str]


def _prepare(values: pl.DataFrame, where: str) -> _Prepared:
    need = {"dataset", "variant", "seed", "query_id", "value"}
    missing = sorted(need - set(values.columns))
    if missing:
        raise StabilityError(f"{where}: per-query table lacks column(s) {missing}; expected {sorted(need)}")
    df = values.select(
        pl.col("dataset").cast(pl.String),
        pl.col("variant").cast(pl.String),
        pl.col("seed").cast(pl.Int64),
        pl.col("query_id").cast(pl.String),
        pl.col("value").cast(pl.Float64),
        (pl.col("cluster") if "cluster" in values.columns else pl.col("query_id")).cast(pl.String).alias("cluster"),
    )
    for col in ("dataset", "variant", "query_id", "cluster"):
        if df[col].null_count():
            row = int(df[col].is_null().arg_max())
            raise StabilityError(f"{where}: column {col!r} is null at row {row}; per-query rows need it")
    if df.height == 0:
        raise StabilityError(f"{where}: no per-query rows to resample")
    dup = df.select("dataset", "variant", "seed", "query_id").is_duplicated()
    if dup.any():
        row = int(dup.arg_max())
        ident = {k: df[k][row] for k in ("dataset", "variant", "seed", "query_id")}
        raise StabilityError(f"{where}: duplicate per-query row {ident} (row {row})")
    nonfinite = df.filter(pl.col("value").is_not_null() & ~pl.col("value").is_finite())
    if nonfinite.height:
        raise StabilityError(f"{where}: non-finite value in row {nonfinite.row(0, named=True)}")
    bad_cluster = df.group_by("dataset", "query_id").agg(pl.col("cluster").n_unique().alias("n")).filter(pl.col("n") > 1)
    if bad_cluster.height:
        raise StabilityError(f"{where}: item {bad_cluster.row(0, named=True)} is assigned to several clusters")

    # A variant with no value at all (e.g. tau-PSI of a tie-prone grader) leaves the
    # column instead of emptying it for everyone.
    all_variants = sorted(df["variant"].unique().to_list())
    present = df.filter(pl.col("value").is_not_null())
    kept = sorted(present["variant"].unique().to_list())
    excluded = [v for v in all_variants if v not in kept]
    df = df.filter(pl.col("variant").is_in(kept))

    runs_df = df.select("variant", "seed").unique().sort("variant", "seed", nulls_last=True)
    runs = [(r["variant"], r["seed"]) for r in runs_df.iter_rows(named=True)]
    n_runs = len(runs)
    variant_runs = [np.array([i for i, (v, _) in enumerate(runs) if v == var]) for var in kept]

    df = df.join(
        runs_df.with_row_index("run").with_columns(pl.col("run").cast(pl.Int64)),
        on=["variant", "seed"], how="left", nulls_equal=True,
    )
    total_items = df.select("dataset", "query_id").unique().height
    # Shared = a non-null value in every run.
    shared = (
        df.filter(pl.col("value").is_not_null())
        .group_by("dataset", "query_id")
        .agg(pl.col("run").n_unique().alias("n"))
        .filter(pl.col("n") == n_runs)
        .select("dataset", "query_id")
    )

    all_datasets = sorted(df["dataset"].unique().to_list())
    df = df.join(shared, on=["dataset", "query_id"], how="semi")
    dropped = total_items - shared.height
    datasets = sorted(df["dataset"].unique().to_list())
    sums, counts, items_per_dataset = [], [], {}
    for ds in datasets:
        part = df.filter(pl.col("dataset") == ds)
        items = sorted(part["query_id"].unique().to_list())
        item_pos = {q: i for i, q in enumerate(items)}
        clusters_of = dict(part.select("query_id", "cluster").unique().iter_rows())
        cluster_names = sorted(set(clusters_of.values()))
        cluster_pos = {c: i for i, c in enumerate(cluster_names)}
        mat = np.zeros((len(items), n_runs))
        qi = np.array([item_pos[q] for q in part["query_id"].to_list()])
        mat[qi, part["run"].to_numpy()] = part["value"].to_numpy()
        item_cluster = np.array([cluster_pos[clusters_of[q]] for q in items])
        s = np.zeros((len(cluster_names), n_runs))
        np.add.at(s, item_cluster, mat)
        sums.append(s)
        counts.append(np.bincount(item_cluster, minlength=len(cluster_names)).astype(float))
        items_per_dataset[ds] = len(items)
    lost = [d for d in all_datasets if d not in datasets]
    return _Prepared(kept, runs, variant_runs, datasets, sums, counts, items_per_dataset, df, dropped, excluded, lost)


# ------------------------------------------------------------------------- bootstrap


def _resampled_run_means(prep: _Prepared, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, runs): dataset-weighted means under paired (hierarchical) resampling."""
    n_d = len(prep.datasets)
    n_runs = len(prep.runs)
    out = np.empty((resamples, n_runs))
    for start in range(0, resamples, _BLOCK):
        b = min(_BLOCK, resamples - start)
        # One dataset cannot be resampled meaningfully; several are drawn with replacement.
        dsel = rng.integers(0, n_d, size=(b, n_d)) if n_d > 1 else np.zeros((b, 1), dtype=np.int64)
        slot_means = np.empty((b, n_d, n_runs))
        for d in range(n_d):
            rows, slots = np.nonzero(dsel == d)
            k = rows.size
            if k == 0:
                continue
            n_c = prep.counts[d].size
            idx = rng.integers(0, n_c, size=(k, n_c))
            # Multiplicity of each cluster in each draw: the weights of a weighted mean.
            w = np.bincount((np.arange(k)[:, None] * n_c + idx).ravel(), minlength=k * n_c)
            w = w.reshape(k, n_c).astype(float)
            slot_means[rows, slots] = (w @ prep.sums[d]) / (w @ prep.counts[d])[:, None]
        out[start : start + b] = slot_means.mean(axis=1)
    return out


def _variant_values(prep: _Prepared, run_means: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(resamples, variants): one run drawn per variant per resample."""
    b = run_means.shape[0]
    cols = np.empty((b, len(prep.variants)), dtype=np.int64)
    for v, runs in enumerate(prep.variant_runs):
        cols[:, v] = runs[rng.integers(0, runs.size, size=b)] if runs.size > 1 else runs[0]
    return np.take_along_axis(run_means, cols, axis=1)


def _full_sample(prep: _Prepared) -> np.ndarray:
    per_run = np.mean([s.sum(0) / c.sum() for s, c in zip(prep.sums, prep.counts)], axis=0)
    return np.array([per_run[r].mean() for r in prep.variant_runs])


def _score(x: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """Larger is better; rounded so that float noise does not break exact ties."""
    r = np.round(x, _TIE_DECIMALS)
    return -r if lower_is_better else r


def _ranks(score: np.ndarray) -> np.ndarray:
    return rankdata(-score, method="average", axis=-1)


def kendall_tau_b(reference: np.ndarray, others: np.ndarray) -> np.ndarray:
    """tau-b between a reference score vector (V,) and each row of others (B, V); nan if undefined."""
    i, j = np.triu_indices(reference.size, 1)
    s0 = np.sign(reference[i] - reference[j])
    s = np.sign(others[:, i] - others[:, j])
    denom = np.sqrt(np.abs(s0).sum() * np.abs(s).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (s * s0).sum(axis=1) / np.where(denom > 0, denom, 1), np.nan)


def _interval(a: np.ndarray, method: str = "linear") -> np.ndarray:
    return np.quantile(a, [0.025, 0.975], axis=0, method=method)


def _f(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _rank_key(r: float) -> str:
    return str(int(r)) if float(r).is_integer() else f"{r:g}"


def paired_bootstrap(
    values: pl.DataFrame,
    *,
    lower_is_better: bool,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    per_presentation: pl.DataFrame | None = None,
    prompt_variants: pl.DataFrame | None = None,
    where: str = "per-query values",
) -> dict[str, Any]:
    """Paired bootstrap of one leaderboard column.

    ``values``: columns dataset, variant, seed (null for single-run variants),
    query_id, value, and optionally cluster (items of one cluster are drawn
    together). ``prompt_variants`` (dataset, query_id, prompt_variant; null where a
    row has none) asks for ``promptSensitivity``. Returns the per-column JSON dict
    documented in the module docstring (without the column identity fields).
    """
    if resamples < 1:
        raise StabilityError(f"{where}: resamples must be >= 1, got {resamples}")
    prep = _prepare(values, where)
    warnings: list[str] = []
    if prep.excluded_variants:
        warnings.append(f"variant(s) {prep.excluded_variants} have no non-null value and are left out")
    if not prep.variants:
        raise StabilityError(f"{where}: no variant has a non-null value")
    n_rows = sum(prep.items_per_dataset.values())
    n_items = int(sum(c.size for c in prep.counts))  # resampled units: clusters
    if n_rows == 0:
        raise StabilityError(
            f"{where}: no query is shared by all {len(prep.runs)} runs of variants {prep.variants}"
        )
    if prep.dropped_datasets:
        warnings.append(f"dataset(s) {prep.dropped_datasets} have no query shared by every run and are left out")
    if prep.dropped:
        warnings.append(f"{prep.dropped} quer(ies) not shared by every run were dropped")
    if n_items < MIN_SHARED_ITEMS:
        warnings.append(f"only {n_items} shared items (< {MIN_SHARED_ITEMS}): intervals are unreliable")
    if all(r.size == 1 for r in prep.variant_runs):
        warnings.append("one run per variant: no seed variation enters the intervals")
    if resamples < MIN_RESAMPLES:
        warnings.append(f"only {resamples} resamples (< {MIN_RESAMPLES}): percentile intervals are coarse")
    if len(prep.variants) < 2:
        warnings.append("fewer than two variants: ranks are trivial")

    rng = np.random.default_rng(seed)
    boot = _variant_values(prep, _resampled_run_means(prep, resamples, rng), rng)
    full = _full_sample(prep)
    s_full = _score(full, lower_is_better)
    s_boot = _score(boot, lower_is_better)
    rank_full = _ranks(s_full)
    rank_boot = _ranks(s_boot)

    best = s_boot.max(axis=1, keepdims=True)
    is_best = s_boot == best
    p_first = (is_best / is_best.sum(axis=1, keepdims=True)).mean(axis=0)
    mean_iv = _interval(boot)
    rank_iv = _interval(rank_boot, method="inverted_cdf")  # observed ranks, not interpolated
    taus = kendall_tau_b(s_full, s_boot)
    if np.isnan(taus).all():
        mean_tau = None
        if len(prep.variants) >= 2:
            warnings.append("Kendall tau-b undefined: every variant ties in the full sample or in every resample")
    else:
        mean_tau = _f(np.nanmean(taus))

    names = prep.variants
    order = sorted(range(len(names)), key=lambda v: (rank_full[v], names[v]))
    result: dict[str, Any] = {
        "resamples": int(resamples),
        "seed": int(seed),
        "datasets": prep.datasets,
        "sharedItems": n_items,
        "sharedItemsPerDataset": {d: int(c.size) for d, c in zip(prep.datasets, prep.counts)},
        "sharedClusters": n_items,
        "sharedRows": int(n_rows),
        "sharedRowsPerDataset": prep.items_per_dataset,
        "droppedItems": int(prep.dropped),
        "runsPerVariant": {names[v]: int(prep.variant_runs[v].size) for v in order},
        "variants": [names[v] for v in order],
        "mean": {names[v]: _f(full[v]) for v in order},
        "meanInterval95": {names[v]: [_f(mean_iv[0, v]), _f(mean_iv[1, v])] for v in order},
        "rank": {names[v]: _f(rank_full[v]) for v in order},
        "probabilityFirst": {names[v]: _f(p_first[v]) for v in order},
        "rankInterval95": {names[v]: [_f(rank_iv[0, v]), _f(rank_iv[1, v])] for v in order},
        "rankDistribution": {},
        "meanKendallTau": mean_tau,
        "pairwise": {},
    }
    for v in order:
        vals, cnt = np.unique(rank_boot[:, v], return_counts=True)
        result["rankDistribution"][names[v]] = {_rank_key(r): _f(c / resamples) for r, c in zip(vals, cnt)}
    diff = boot[:, :, None] - boot[:, None, :]
    better = (s_boot[:, :, None] > s_boot[:, None, :]) + 0.5 * (s_boot[:, :, None] == s_boot[:, None, :])
    p_better = better.mean(axis=0)
    diff_iv = _interval(diff)
    for a in order:
        result["pairwise"][names[a]] = {
            names[b]: {
                "probabilityBetter": _f(p_better[a, b]),
                "difference": _f(full[a] - full[b]),
                "differenceInterval95": [_f(diff_iv[0, a, b]), _f(diff_iv[1, a, b])],
            }
            for b in order
            if b != a
        }
    if per_presentation is None:
        result["presentationSensitivity"] = None
        result["presentationSensitivityReason"] = NO_PRESENTATION_REASON
    else:
        result["presentationSensitivity"] = presentation_sensitivity(
            per_presentation, lower_is_better=lower_is_better, variants=names, where=f"{where} (per presentation)"
        )
        result["presentationSensitivityReason"] = None
    if prompt_variants is None:
        result["promptSensitivity"], result["promptSensitivityReason"] = None, NO_PROMPT_VARIANT_REASON
    else:
        shared = prep.shared_rows.join(prompt_variants, on=["dataset", "query_id"], how="left")
        ps = prompt_sensitivity(shared, lower_is_better=lower_is_better, variants=names)
        result["promptSensitivity"] = ps
        result["promptSensitivityReason"] = None if ps is not None else NO_PROMPT_VARIANT_REASON
    result["warnings"] = warnings
    return result


# --------------------------------------------------------------- presentation ranks


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
    mat = np.full((len(presentations), len(names)), np.nan)
    v_pos = {v: i for i, v in enumerate(names)}
    p_pos = {p: i for i, p in enumerate(presentations)}
    for row in means.iter_rows(named=True):
        mat[p_pos[row["presentation"]], v_pos[row["variant"]]] = row["value"]
    ranks = _ranks(_score(mat, lower_is_better))
    return {
        "presentations": [int(p) for p in presentations],
        "sharedItems": int(shared.height),
        "ranks": {v: {str(p): _f(ranks[i, j]) for i, p in enumerate(presentations)} for j, v in enumerate(names)},
        "rankRange": {v: [_f(ranks[:, j].min()), _f(ranks[:, j].max())] for j, v in enumerate(names)},
        "rankSpread": {v: _f(ranks[:, j].max() - ranks[:, j].min()) for j, v in enumerate(names)},
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
    mat = np.full((len(pvs), len(names)), np.nan)
    p_pos, v_pos = {p: i for i, p in enumerate(pvs)}, {v: i for i, v in enumerate(names)}
    for row in means.iter_rows(named=True):
        mat[p_pos[row["prompt_variant"]], v_pos[row["variant"]]] = row["value"]
    ranks = _ranks(_score(mat, lower_is_better))
    counts = dict(df.filter(pl.col("variant") == names[0]).group_by("prompt_variant")
                  .agg(pl.struct("dataset", "query_id").n_unique().alias("n")).iter_rows())
    return {
        "promptVariants": pvs,
        "sharedItems": {p: int(counts.get(p, 0)) for p in pvs},
        "ranking": {p: [names[j] for j in sorted(range(len(names)), key=lambda j: (ranks[i, j], names[j]))]
                    for i, p in enumerate(pvs)},
        "mean": {v: {p: _f(mat[i, j]) for i, p in enumerate(pvs)} for j, v in enumerate(names)},
        "ranks": {v: {p: _f(ranks[i, j]) for i, p in enumerate(pvs)} for j, v in enumerate(names)},
        "rankRange": {v: [_f(ranks[:, j].min()), _f(ranks[:, j].max())] for j, v in enumerate(names)},
        "rankSpread": {v: _f(ranks[:, j].max() - ranks[:, j].min()) for j, v in enumerate(names)},
    }


# ------------------------------------------------------------------- JSON run reports


def analyse_reports(
    paths: Iterable[str | os.PathLike],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    lower_is_better: bool | None = None,
    label: str = "report",
    per_presentation: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """Bootstrap JSON run reports; the direction comes from the reports unless given."""
    from presdep.reports import prompt_variant, reports_frame

    frame, higher = reports_frame(paths)
    if higher is True and lower_is_better:
        raise StabilityError("lower-is-better contradicts the reports, which state higherIsBetter: true")
    lower = bool(lower_is_better) or higher is False
    pv = frame.select("dataset", "query_id").unique().with_columns(
        pl.col("query_id").map_elements(prompt_variant, return_dtype=pl.String).alias("prompt_variant"))
    res = paired_bootstrap(frame, lower_is_better=lower, resamples=resamples, seed=seed,
                           per_presentation=per_presentation,
                           prompt_variants=pv if pv["prompt_variant"].is_not_null().any() else None,
                           where="reports")
    head = {"column": label, "task": None, "metric": None, "perturbation": None,
            "direction": "lower" if lower else "higher"}
    return {**head, **res}


# ------------------------------------------------------------------------ Table 1


def analyse_column(
    metrics: pl.DataFrame,
    column: str,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    per_presentation: pl.DataFrame | None = None,
    where: str = "metrics",
) -> dict[str, Any]:
    """Bootstrap one Table 1 column of a (concatenated) metrics table."""
    values = column_values(metrics, column, where)  # validates the column name
    spec = TABLE1_COLUMNS[column]
    res = paired_bootstrap(
        values,
        lower_is_better=spec.direction == "lower",
        resamples=resamples,
        seed=seed,
        per_presentation=per_presentation,
        where=f"{where}, column {column}",
    )
    head = {"column": column, "task": spec.task, "metric": spec.metric,
            "perturbation": spec.perturbation, "direction": spec.direction}
    return {**head, **res}


def analyse_table1(
    metrics: pl.DataFrame,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    per_presentation: Mapping[str, pl.DataFrame] | None = None,
    columns: Iterable[str] | None = None,
    where: str = "metrics",
) -> dict[str, Any]:
    """Every Table 1 column with per-query rows; the others are listed under ``skipped``."""
    out: dict[str, Any] = {"presdepVersion": __version__, "columns": {}, "skipped": {}}
    per_presentation = per_presentation or {}
    for column in columns or TABLE1_COLUMNS:
        vals = column_values(metrics, column, where)
        if vals.height == 0:
            spec = TABLE1_COLUMNS[column]
            out["skipped"][column] = (
                f"no per-query rows with task={spec.task!r}, metric={spec.metric!r}, "
                f"perturbation={spec.perturbation!r}"
            )
            continue
        out["columns"][column] = analyse_column(
            metrics, column, resamples=resamples, seed=seed,
            per_presentation=per_presentation.get(column), where=where,
        )
    return out


def read_metrics(paths: Iterable[str | os.PathLike]) -> pl.DataFrame:
    """Concatenate validated metrics Parquet files."""
    from presdep.schemas import read_table

    paths = list(paths)
    frames = [read_table(p, "metrics") for p in paths]
    if not frames:
        raise StabilityError("no metrics files given")
    df = pl.concat(frames, how="vertical")
    dup = df.select("dataset", "task", "variant", "seed", "perturbation", "query_id", "metric").is_duplicated()
    if dup.any():
        raise StabilityError(f"metrics files {list(map(str, paths))}: duplicate row {df.row(int(dup.arg_max()), named=True)}")
    return df


def write_stability_json(result: Mapping[str, Any], path: str | os.PathLike) -> Path:
    from presdep.schemas import write_text_atomic

    return write_text_atomic(path, json.dumps(result, indent=2, allow_nan=False) + "\n")


def write_table1_stability(
    metrics_paths: Iterable[str | os.PathLike],
    json_path: str | os.PathLike,
    svg_dir: str | os.PathLike,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """The workflow step: metrics files -> table1.json + one ``<column>.svg`` per analysed column."""
    from presdep.stability_svg import write_stability_svg

    metrics_paths = list(metrics_paths)
    result = analyse_table1(read_metrics(metrics_paths), resamples=resamples, seed=seed)
    svg_dir = Path(svg_dir)
    svg_dir.mkdir(parents=True, exist_ok=True)
    for column, res in result["columns"].items():
        write_stability_svg(res, svg_dir / f"{column}.svg")
    write_stability_json(result, json_path)
    return result
