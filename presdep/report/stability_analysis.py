"""The leaderboard analysis of one column's per-query rows: paired bootstrap rank intervals
(presdep.report.bootstrap), with presentation and prompt sensitivity
(presdep.report.rank_sensitivity). No file I/O (presdep.report.stability_io).

Method (docs/methods/stability.md):

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
* Rank(UB) and tiers (presdep.report.stability_tiers): row a is significantly better
  than row b when the paired-bootstrap interval of mean_a - mean_b at ``level``
  (default 95%) excludes 0 on the side the column prefers; Rank(UB) = 1 + the rows
  significantly better; tiers are walked from the best (a row opens a new tier when any
  member of the current tier is significantly better than it), so no tier holds a
  separable pair. The intervals are per pair, unadjusted for multiplicity (``multiplicity``).
* Degenerate cells: a variant whose cell of the column has a degenerate-decision flag
  raised (the metrics' aggregate ``warn_*`` rows of presdep.metrics.rerank_rows.DEGENERATE_FLAGS,
  for the columns of its DEGENERATE_METRICS: Jacc.) on any dataset or seed is left out of
  that column's ranking, intervals, P(first) and pairwise comparisons, and listed under
  ``flagged`` with its reasons; a column whose every variant is flagged is ``skipped``.

JSON layout (``results/stability/table1.json``, written by
presdep.report.stability_io.write_stability_json)::

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
                               "differenceInterval95": [lo, hi],
                               "significantlyBetter": bool}}},   # a better than b at tierLevel
          "tierLevel": float,               # e.g. 0.95: the level of significantlyBetter
          "multiplicity": str,              # "unadjusted: per-pair 95% ... intervals, no correction ..."
          "rankUB": {variant: int},         # 1 + rows significantly better than it
          "tier": {variant: int},           # 1 = best; no two rows of a tier separable
          "tiers": [[variant, ...], ...],   # the tiers' members, best tier first
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
          "warnings": [str],
          "flagged": {variant: [reason]}    # left out of everything above: degenerate cell,
        }                                   # reason "dataset[seed s]: t* keeps every candidate"
      },
      "skipped": {"<column>": "reason"},   # no per-query rows, or every variant flagged
      "flagged": {"<column>": {variant: [reason]}}   # every column with a flagged variant
    }
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import polars as pl

from presdep import __version__
from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.errors import StabilityError
from presdep.metrics.rerank_rows import DEGENERATE_FLAGS, DEGENERATE_METRICS, flag_place, raised_flags
from presdep.report.bootstrap import (
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_RESAMPLES,
    MIN_SHARED_ITEMS,
    ClusterSums,
    RankStatistics,
    bootstrap,
    json_float,
    rank_distribution,
)
from presdep.report.metric_columns import column_values
from presdep.report.rank_sensitivity import presentation_sensitivity, prompt_sensitivity
from presdep.report.stability_tiers import separability, tier_fields

NO_PROMPT_VARIANT_REASON = "no task id carries a prompt-variant suffix (-v1, -v2, ...)"
NO_PRESENTATION_REASON = (
    "no per-presentation input given: the metrics contract stores per-query values "
    "already averaged over presentations"
)


# ----------------------------------------------------------------------------- input


@dataclass
class _Prepared:
    variants: list[str]  # sorted names
    runs: list[tuple[str, Any]]  # (variant, seed) per run column
    datasets: list[str]
    arrays: ClusterSums  # what the bootstrap resamples
    items_per_dataset: dict[str, int]  # task rows
    shared_rows: pl.DataFrame  # per-row input restricted to rows shared by every run
    dropped: int
    excluded_variants: list[str]
    dropped_datasets: list[str]


def _validated(values: pl.DataFrame, where: str) -> pl.DataFrame:
    """The per-query rows, typed, with a ``cluster`` column; refuses nulls, duplicates, NaN."""
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
    return df


def _cluster_sums(df: pl.DataFrame, datasets: list[str], n_runs: int) -> tuple[list, list, dict[str, int]]:
    """Per dataset: (clusters, runs) sums of item values, (clusters,) item counts, item count."""
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
    return sums, counts, items_per_dataset


def _prepare(values: pl.DataFrame, where: str) -> _Prepared:
    df = _validated(values, where)
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
    datasets = sorted(df["dataset"].unique().to_list())
    sums, counts, items_per_dataset = _cluster_sums(df, datasets, n_runs)
    lost = [d for d in all_datasets if d not in datasets]
    return _Prepared(kept, runs, datasets, ClusterSums(n_runs, variant_runs, sums, counts), items_per_dataset,
                     df, total_items - shared.height, excluded, lost)


# ------------------------------------------------------------------------- bootstrap


def _rank_key(r: float) -> str:
    return str(int(r)) if float(r).is_integer() else f"{r:g}"


def _input_warnings(prep: _Prepared, resamples: int, where: str) -> list[str]:
    """What limits the result; raises when nothing is left to resample."""
    warnings: list[str] = []
    if prep.excluded_variants:
        warnings.append(f"variant(s) {prep.excluded_variants} have no non-null value and are left out")
    if not prep.variants:
        raise StabilityError(f"{where}: no variant has a non-null value")
    n_items = int(sum(c.size for c in prep.arrays.counts))  # resampled units: clusters
    if sum(prep.items_per_dataset.values()) == 0:
        raise StabilityError(
            f"{where}: no query is shared by all {len(prep.runs)} runs of variants {prep.variants}"
        )
    if prep.dropped_datasets:
        warnings.append(f"dataset(s) {prep.dropped_datasets} have no query shared by every run and are left out")
    if prep.dropped:
        warnings.append(f"{prep.dropped} quer(ies) not shared by every run were dropped")
    if n_items < MIN_SHARED_ITEMS:
        warnings.append(f"only {n_items} shared items (< {MIN_SHARED_ITEMS}): intervals are unreliable")
    if all(r.size == 1 for r in prep.arrays.variant_runs):
        warnings.append("one run per variant: no seed variation enters the intervals")
    if resamples < MIN_RESAMPLES:
        warnings.append(f"only {resamples} resamples (< {MIN_RESAMPLES}): percentile intervals are coarse")
    if len(prep.variants) < 2:
        warnings.append("fewer than two variants: ranks are trivial")
    return warnings


def _mean_tau(taus: np.ndarray, n_variants: int, warnings: list[str]) -> float | None:
    if not np.isnan(taus).all():
        return json_float(np.nanmean(taus))
    if n_variants >= 2:
        warnings.append("Kendall tau-b undefined: every variant ties in the full sample or in every resample")
    return None


def _pairwise(names: list[str], order: list[int], st: RankStatistics, better: np.ndarray) -> dict[str, Any]:
    p_better, diff_iv = st.probability_better, st.difference_interval
    return {
        names[a]: {
            names[b]: {
                "probabilityBetter": json_float(p_better[a, b]),
                "difference": json_float(st.full[a] - st.full[b]),
                "differenceInterval95": [json_float(diff_iv[0, a, b]), json_float(diff_iv[1, a, b])],
                "significantlyBetter": bool(better[a, b]),
            }
            for b in order
            if b != a
        }
        for a in order
    }


def _bootstrap_fields(prep: _Prepared, st: RankStatistics, resamples: int, seed: int,
                      mean_tau: float | None, better: np.ndarray, level: float) -> dict[str, Any]:
    """The result's sample description, rank statistics and tiers, variants best first."""
    names, runs_of = prep.variants, prep.arrays.variant_runs
    order = sorted(range(len(names)), key=lambda v: (st.rank_full[v], names[v]))
    n_items = int(sum(c.size for c in prep.arrays.counts))
    mean_iv, rank_iv = st.mean_interval, st.rank_interval
    distribution = {}
    for v in order:
        vals, probs = rank_distribution(st.rank_boot[:, v])
        distribution[names[v]] = {_rank_key(r): json_float(p) for r, p in zip(vals, probs)}
    return {
        "resamples": int(resamples),
        "seed": int(seed),
        "datasets": prep.datasets,
        "sharedItems": n_items,
        "sharedItemsPerDataset": {d: int(c.size) for d, c in zip(prep.datasets, prep.arrays.counts)},
        "sharedClusters": n_items,
        "sharedRows": int(sum(prep.items_per_dataset.values())),
        "sharedRowsPerDataset": prep.items_per_dataset,
        "droppedItems": int(prep.dropped),
        "runsPerVariant": {names[v]: int(runs_of[v].size) for v in order},
        "variants": [names[v] for v in order],
        "mean": {names[v]: json_float(st.full[v]) for v in order},
        "meanInterval95": {names[v]: [json_float(mean_iv[0, v]), json_float(mean_iv[1, v])] for v in order},
        "rank": {names[v]: json_float(st.rank_full[v]) for v in order},
        "probabilityFirst": {names[v]: json_float(st.probability_first[v]) for v in order},
        "rankInterval95": {names[v]: [json_float(rank_iv[0, v]), json_float(rank_iv[1, v])] for v in order},
        "rankDistribution": distribution,
        "meanKendallTau": mean_tau,
        "pairwise": _pairwise(names, order, st, better),
        **tier_fields(names, order, better, level),
    }


def _sensitivity_fields(prep: _Prepared, lower_is_better: bool, per_presentation: pl.DataFrame | None,
                        prompt_variants: pl.DataFrame | None, where: str) -> dict[str, Any]:
    """presentationSensitivity and promptSensitivity, each with the reason when it is null."""
    out: dict[str, Any] = {}
    if per_presentation is None:
        out["presentationSensitivity"] = None
        out["presentationSensitivityReason"] = NO_PRESENTATION_REASON
    else:
        out["presentationSensitivity"] = presentation_sensitivity(
            per_presentation, lower_is_better=lower_is_better, variants=prep.variants,
            where=f"{where} (per presentation)",
        )
        out["presentationSensitivityReason"] = None
    if prompt_variants is None:
        out["promptSensitivity"], out["promptSensitivityReason"] = None, NO_PROMPT_VARIANT_REASON
    else:
        shared = prep.shared_rows.join(prompt_variants, on=["dataset", "query_id"], how="left")
        ps = prompt_sensitivity(shared, lower_is_better=lower_is_better, variants=prep.variants)
        out["promptSensitivity"] = ps
        out["promptSensitivityReason"] = None if ps is not None else NO_PROMPT_VARIANT_REASON
    return out


def paired_bootstrap(
    values: pl.DataFrame,
    *,
    lower_is_better: bool,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    per_presentation: pl.DataFrame | None = None,
    prompt_variants: pl.DataFrame | None = None,
    where: str = "per-query values",
    level: float = DEFAULT_LEVEL,
) -> dict[str, Any]:
    """Paired bootstrap of one leaderboard column.

    ``values``: columns dataset, variant, seed (null for single-run variants),
    query_id, value, and optionally cluster (items of one cluster are drawn
    together). ``prompt_variants`` (dataset, query_id, prompt_variant; null where a
    row has none) asks for ``promptSensitivity``. ``level`` is the level at which rows
    count as separable (rankUB, tiers). Returns the per-column JSON dict documented in
    the module docstring (without the column identity fields).
    """
    if resamples < 1:
        raise StabilityError(f"{where}: resamples must be >= 1, got {resamples}")
    if not 0 < level < 1:
        raise StabilityError(f"{where}: the tier level must lie strictly between 0 and 1, got {level}")
    prep = _prepare(values, where)
    warnings = _input_warnings(prep, resamples, where)
    st = bootstrap(prep.arrays, lower_is_better=lower_is_better, resamples=resamples, seed=seed)
    mean_tau = _mean_tau(st.taus, len(prep.variants), warnings)
    better = separability(st, lower_is_better, level)
    result = _bootstrap_fields(prep, st, resamples, seed, mean_tau, better, level)
    result.update(_sensitivity_fields(prep, lower_is_better, per_presentation, prompt_variants, where))
    result["warnings"] = warnings
    return result


# ------------------------------------------------------------------------ Table 1


def column_flags(metrics: pl.DataFrame, column: str) -> dict[str, list[str]]:
    """variant -> reasons ("dataset[seed s]: t* keeps every candidate") of every degenerate-decision
    flag raised for its cell of ``column`` in the metrics' aggregate warn_* rows; {} for a column
    no flag concerns."""
    spec = TABLE1_COLUMNS[column]
    if spec.metric not in DEGENERATE_METRICS or "metric" not in metrics.columns:
        return {}
    out: dict[str, list[str]] = {}
    for r in raised_flags(metrics).filter(pl.col("task") == spec.task).iter_rows(named=True):
        reason = f"{flag_place(r['dataset'], r['seed'])}: {DEGENERATE_FLAGS[r['metric']]}"
        out.setdefault(r["variant"], []).append(reason)
    return out


def _flagged_in(values: pl.DataFrame, flags: Mapping[str, list[str]]) -> dict[str, list[str]]:
    present = set(values["variant"].unique().to_list())
    return {v: list(r) for v, r in sorted(flags.items()) if v in present}


def _all_flagged_reason(flagged: Mapping[str, list[str]]) -> str:
    return ("every variant's cell is degenerate, nothing to rank: "
            + "; ".join(f"{v} ({', '.join(r)})" for v, r in flagged.items()))


def _nothing_left(values: pl.DataFrame, flagged: Mapping[str, list[str]]) -> bool:
    """Whether leaving the flagged variants out leaves no value to rank (other variants all null)."""
    rest = values.filter(~pl.col("variant").is_in(list(flagged)) & pl.col("value").is_not_null())
    return bool(flagged) and rest.height == 0


def analyse_column(
    metrics: pl.DataFrame,
    column: str,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    per_presentation: pl.DataFrame | None = None,
    where: str = "metrics",
    level: float = DEFAULT_LEVEL,
) -> dict[str, Any]:
    """Bootstrap one Table 1 column of a (concatenated) metrics table; variants with a degenerate
    cell (column_flags) are left out of the ranking and listed under ``flagged``."""
    values = column_values(metrics, column, where)  # validates the column name
    spec = TABLE1_COLUMNS[column]
    flagged = _flagged_in(values, column_flags(metrics, column))
    ranked = values.filter(~pl.col("variant").is_in(list(flagged)))
    if _nothing_left(values, flagged):
        raise StabilityError(f"{where}, column {column}: {_all_flagged_reason(flagged)}")
    res = paired_bootstrap(
        ranked,
        lower_is_better=spec.direction == "lower",
        resamples=resamples,
        seed=seed,
        per_presentation=per_presentation,
        where=f"{where}, column {column}",
        level=level,
    )
    if flagged:
        res["warnings"].insert(0, f"variant(s) {list(flagged)} left out of the ranking and P(first): "
                                  "degenerate cell (see flagged)")
    res["flagged"] = flagged
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
    level: float = DEFAULT_LEVEL,
) -> dict[str, Any]:
    """Every Table 1 column with per-query rows; the others, and those whose every variant has a
    degenerate cell, are listed under ``skipped``; ``flagged`` lists the degenerate cells."""
    out: dict[str, Any] = {"presdepVersion": __version__, "columns": {}, "skipped": {}, "flagged": {}}
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
        flagged = _flagged_in(vals, column_flags(metrics, column))
        if flagged:
            out["flagged"][column] = flagged
        if _nothing_left(vals, flagged):
            out["skipped"][column] = _all_flagged_reason(flagged)
            continue
        out["columns"][column] = analyse_column(
            metrics, column, resamples=resamples, seed=seed,
            per_presentation=per_presentation.get(column), where=where, level=level,
        )
    return out
