"""The width effect at fixed weights: the same weights served at B = 1 and at their native B.

Per Table 1 row, task and training seed, per collection (a native dataset and its B = 1 alias,
the same candidates and qrels scored one document per forward):

* C_obs = native single-pass quality (first-stage pass at the native B) - the B = 1 quality;
* V_B = native K = 10 order-averaged quality (presdep.metrics.order_averaged) - the B = 1 quality.

Quality is nDCG@10 (reranking, QA) or nDCG@1 (responses). Within a seed the equal-weight mean
over collections; over seeds the mean and the sample SD. Per seed a paired prompt bootstrap:
each collection's queries drawn with replacement, one draw shared by C_obs, V_B and both sides
of each difference, and its 95% percentile interval (docs/methods/width.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from presdep.config.records import Variant
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_text_atomic
from presdep.contracts.tasks import FIRST_STAGE, TASKS
from presdep.report.bootstrap import percentile_interval
from presdep.report.tables import load_metrics

log = logging.getLogger(__name__)

# Per task: the single-pass quality metric and its K = 10 order-averaged form.
QUALITY = {"rerank": ("ndcg@10", "ndcg10_order_averaged"), "qa": ("ndcg@10", "ndcg10_order_averaged"),
           "response": ("ndcg@1", "ndcg1_order_averaged")}
ORDER_AVERAGED_PERTURBATION = "random_shuffle"
# The three sides of one collection: native single pass, native order-averaged, B = 1.
NATIVE, AVERAGED, SINGLE = "native", "averaged", "single"
DEFAULT_RESAMPLES = 100000
DEFAULT_SEED = 0
# Resamples drawn at once: bounds the (block, queries) index arrays of a collection.
_BLOCK = 10000
_NO_SEED = -1  # an untrained row's seed while grouping (polars groups nulls awkwardly)

SEED_SCHEMA = {"label": pl.String, "task": pl.String, "seed": pl.Int64, "collections": pl.Int64,
               "queries": pl.Int64, "dropped": pl.Int64, "c_obs": pl.Float64, "c_obs_low": pl.Float64,
               "c_obs_high": pl.Float64, "v_b": pl.Float64, "v_b_low": pl.Float64, "v_b_high": pl.Float64,
               "datasets": pl.String}
SUMMARY_SCHEMA = {"label": pl.String, "task": pl.String, "seeds": pl.Int64, "collections": pl.Int64,
                  "c_obs_mean": pl.Float64, "c_obs_sd": pl.Float64, "v_b_mean": pl.Float64, "v_b_sd": pl.Float64}


@dataclass(frozen=True)
class Collection:
    """One collection of one seed: the aggregate values and the per-query differences on the
    queries every side present has (``v_diff`` None without order-averaged rows)."""

    dataset: str
    c_obs: float
    v_b: float | None
    c_diff: np.ndarray
    v_diff: np.ndarray | None
    dropped: int


def check_pairs(pairs: Mapping[str, str]) -> None:
    aliases = list(pairs.values())
    if len(set(aliases)) != len(aliases):
        raise InvalidInput(f"width pairs: two native datasets share a B = 1 alias: {dict(pairs)}")
    if clash := sorted(set(pairs) & set(aliases)):
        raise InvalidInput(f"width pairs: {clash} are both a native dataset and a B = 1 alias")


def side_rows(metrics: pl.DataFrame, pairs: Mapping[str, str], variants: Mapping[str, Variant]) -> pl.DataFrame:
    """label, task, seed, collection, side, query_id, value: every row the width reads, the
    alias's rows under the native dataset's name (the collection)."""
    check_pairs(pairs)
    native_of = {alias: native for native, alias in pairs.items()}
    labels = {name: v.label for name, v in variants.items() if not v.skip}
    usable = metrics.filter(pl.col("variant").is_in(list(labels)) & pl.col("value").is_not_null()
                            & pl.col("value").is_not_nan())
    frames = []
    for task, (quality, averaged) in QUALITY.items():
        of_task = usable.filter(pl.col("task") == task)
        for side, datasets, metric, perturbation in (
                (NATIVE, list(pairs), quality, FIRST_STAGE),
                (AVERAGED, list(pairs), averaged, ORDER_AVERAGED_PERTURBATION),
                (SINGLE, list(native_of), quality, FIRST_STAGE)):
            rows = of_task.filter(pl.col("dataset").is_in(datasets) & (pl.col("metric") == metric)
                                  & (pl.col("perturbation") == perturbation))
            frames.append(rows.select(
                pl.col("variant").replace_strict(labels).alias("label"), pl.col("task"),
                pl.col("seed").cast(pl.Int64).fill_null(_NO_SEED),
                pl.col("dataset").replace(native_of).alias("collection"), pl.lit(side).alias("side"),
                pl.col("query_id"), pl.col("value")))
    out = pl.concat(frames, how="vertical")
    keys = ["label", "task", "seed", "collection", "side", "query_id"]
    twice = out.filter(pl.struct(keys).is_duplicated())
    if twice.height:
        r = twice.row(0, named=True)
        raise InvalidInput(f"width: two variants of row {r['label']!r} fill {r['task']} on {r['collection']} "
                           f"(seed {r['seed']}); a row may hold one variant per task")
    return out


def _collection(dataset: str, rows: pl.DataFrame) -> Collection | None:
    """None when the native single pass or the B = 1 aggregate is missing."""
    agg = {s: v for s, v in rows.filter(pl.col("query_id").is_null()).select("side", "value").iter_rows()}
    if NATIVE not in agg or SINGLE not in agg:
        return None
    per_query: dict[str, dict[str, float]] = {}
    for side, q, v in rows.filter(pl.col("query_id").is_not_null()).select("side", "query_id", "value").iter_rows():
        per_query.setdefault(side, {})[q] = v
    sides = [NATIVE, SINGLE] + ([AVERAGED] if AVERAGED in agg else [])
    seen = [set(per_query.get(s, {})) for s in sides]
    shared = sorted(set.intersection(*seen))
    dropped = len(set.union(*seen)) - len(shared)

    def values(side: str) -> np.ndarray:
        return np.array([per_query[side][q] for q in shared], dtype=np.float64)

    single = values(SINGLE) if shared else np.empty(0)
    has_v = AVERAGED in agg
    return Collection(
        dataset=dataset, c_obs=agg[NATIVE] - agg[SINGLE], v_b=agg[AVERAGED] - agg[SINGLE] if has_v else None,
        c_diff=values(NATIVE) - single if shared else np.empty(0),
        v_diff=(values(AVERAGED) - single if shared else np.empty(0)) if has_v else None, dropped=dropped)


def resampled_widths(collections: Sequence[Collection], resamples: int,
                     seed: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(resamples,) C_obs and V_B under the paired prompt bootstrap (V_B None unless every
    collection has it). Per block of resamples and per collection in order, one
    ``integers(0, n, (block, n))`` draw of query indices serves every side."""
    if any(c.c_diff.size == 0 for c in collections):
        raise ValueError("every collection needs at least one query shared by all its sides")
    with_v = all(c.v_diff is not None for c in collections)
    rng = np.random.Generator(np.random.PCG64(seed))
    c_boot = np.empty(resamples)
    v_boot = np.empty(resamples) if with_v else None
    for start in range(0, resamples, _BLOCK):
        b = min(_BLOCK, resamples - start)
        c_sum, v_sum = np.zeros(b), np.zeros(b)
        for col in collections:
            n = col.c_diff.size
            idx = rng.integers(0, n, size=(b, n))
            c_sum += col.c_diff[idx].mean(axis=1)
            if with_v:
                v_sum += col.v_diff[idx].mean(axis=1)
        # equal weight per collection, whatever its number of queries
        c_boot[start:start + b] = c_sum / len(collections)
        if v_boot is not None:
            v_boot[start:start + b] = v_sum / len(collections)
    return c_boot, v_boot


def _interval(boot: np.ndarray | None) -> tuple[float | None, float | None]:
    if boot is None:
        return None, None
    low, high = percentile_interval(boot)
    return float(low), float(high)


def seed_row(label: str, task: str, seed: int | None, collections: Sequence[Collection], resamples: int,
             boot_seed: int) -> dict:
    """One (row, task, seed): the equal-weight means of the aggregates and their intervals (null
    where a collection has no shared per-query values)."""
    c_obs = float(np.mean([c.c_obs for c in collections]))
    has_v = all(c.v_b is not None for c in collections)
    v_b = float(np.mean([c.v_b for c in collections])) if has_v else None
    bootable = resamples > 0 and all(c.c_diff.size for c in collections)
    c_boot, v_boot = resampled_widths(collections, resamples, boot_seed) if bootable else (None, None)
    (c_low, c_high), (v_low, v_high) = _interval(c_boot), _interval(v_boot)
    return {"label": label, "task": task, "seed": seed, "collections": len(collections),
            "queries": int(sum(c.c_diff.size for c in collections)),
            "dropped": int(sum(c.dropped for c in collections)), "c_obs": c_obs, "c_obs_low": c_low,
            "c_obs_high": c_high, "v_b": v_b, "v_b_low": v_low, "v_b_high": v_high,
            "datasets": " ".join(c.dataset for c in collections)}


def _mean_sd(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample SD (ddof 1) over seeds; null when a seed lacks the value, SD null with one."""
    if not values or any(v is None for v in values):
        return None, None
    arr = np.array(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else None


def summarise(per_seed: pl.DataFrame) -> pl.DataFrame:
    """One row per (label, task): mean and sample SD over seeds of C_obs and V_B."""
    out = []
    for (label, task), g in per_seed.group_by("label", "task", maintain_order=True):
        c_mean, c_sd = _mean_sd(g["c_obs"].to_list())
        v_mean, v_sd = _mean_sd(g["v_b"].to_list())
        out.append({"label": label, "task": task, "seeds": g.height, "collections": int(g["collections"].max()),
                    "c_obs_mean": c_mean, "c_obs_sd": c_sd, "v_b_mean": v_mean, "v_b_sd": v_sd})
    return pl.DataFrame(out, schema=SUMMARY_SCHEMA)


def width_table(metrics: pl.DataFrame, pairs: Mapping[str, str], variants: Mapping[str, Variant], *,
                resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per-seed table, summary table): rows in config order of labels, tasks in TASKS order,
    seeds ascending (an untrained row's seed is null)."""
    rows = side_rows(metrics, pairs, variants)
    if missing := sorted(set(pairs) - set(rows["collection"])):
        log.warning("width: no row has quality on %s or its B = 1 alias", ", ".join(missing))
    label_order = {lab: i for i, lab in enumerate(dict.fromkeys(v.label for v in variants.values() if not v.skip))}
    out = []
    groups = sorted(rows.group_by("label", "task", "seed"),
                    key=lambda kv: (label_order[kv[0][0]], TASKS.index(kv[0][1]), kv[0][2]))
    for (label, task, run_seed), g in groups:
        collections = []
        present = set(g["collection"])
        for dataset in [d for d in pairs if d in present]:
            col = _collection(dataset, g.filter(pl.col("collection") == dataset))
            if col is None:
                log.warning("width: %s %s seed %s: %s lacks its native or B = 1 quality; left out",
                            label, task, run_seed, dataset)
                continue
            if col.dropped:
                log.info("width: %s %s seed %s: %s: %d queries missing on a side, dropped from all",
                         label, task, run_seed, dataset, col.dropped)
            collections.append(col)
        if collections:
            out.append(seed_row(label, task, None if run_seed == _NO_SEED else run_seed, collections, resamples,
                                seed))
    per_seed = pl.DataFrame(out, schema=SEED_SCHEMA)
    return per_seed, summarise(per_seed)


def _num(x: float | None) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.4f}"


def _iv(low: float | None, high: float | None) -> str:
    return "" if low is None else f"[{_num(low)}, {_num(high)}]"


def to_markdown(per_seed: pl.DataFrame, summary: pl.DataFrame, *, resamples: int = DEFAULT_RESAMPLES,
                seed: int = DEFAULT_SEED) -> str:
    """The summary (mean and SD over seeds), then each seed with its intervals."""
    if summary.height == 0:
        return "No row has both its native-B and its B = 1 quality on any collection.\n"
    lines = ["| row | task | C_obs | C_obs SD | V_B | V_B SD | seeds | collections |",
             "|---|---|---|---|---|---|---|---|"]
    for r in summary.iter_rows(named=True):
        lines.append(f"| {r['label']} | {r['task']} | {_num(r['c_obs_mean'])} | {_num(r['c_obs_sd'])} | "
                     f"{_num(r['v_b_mean'])} | {_num(r['v_b_sd'])} | {r['seeds']} | {r['collections']} |")
    lines += ["", "| row | task | seed | C_obs | 95% interval | V_B | 95% interval | collections | queries | dropped |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in per_seed.iter_rows(named=True):
        s = "" if r["seed"] is None else r["seed"]
        lines.append(f"| {r['label']} | {r['task']} | {s} | {_num(r['c_obs'])} | "
                     f"{_iv(r['c_obs_low'], r['c_obs_high'])} | {_num(r['v_b'])} | "
                     f"{_iv(r['v_b_low'], r['v_b_high'])} | {r['collections']} | {r['queries']} | {r['dropped']} |")
    note = ("\nC_obs: native single-pass quality minus the B = 1 quality; V_B: native order-averaged quality "
            "(each document's mean score over the first K = min(10, M) shuffles) minus the B = 1 quality "
            "(nDCG@10; responses nDCG@1), equal-weight means over collections. "
            "Over seeds: mean and sample SD (empty with one seed). Intervals: paired prompt bootstrap per seed, "
            f"{resamples} resamples, seed {seed}, 95% percentile; dropped: queries missing on a side, left out "
            "of every side (docs/methods/width.md).\n")
    return "\n".join(lines) + "\n" + note


def write_width(metrics_paths: Sequence[str | Path], pairs: Mapping[str, str], variants: Mapping[str, Variant],
                out_csv: str | Path, out_md: str | Path, *, resamples: int = DEFAULT_RESAMPLES,
                seed: int = DEFAULT_SEED) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The per-seed table as CSV, and summary plus per-seed table as Markdown."""
    per_seed, summary = width_table(load_metrics(metrics_paths), pairs, variants, resamples=resamples, seed=seed)
    log.info("width: %d rows over %d seed runs", summary.height, per_seed.height)
    write_text_atomic(out_csv, per_seed.write_csv(float_precision=6))
    write_text_atomic(out_md, to_markdown(per_seed, summary, resamples=resamples, seed=seed))
    return per_seed, summary


__all__ = ["Collection", "QUALITY", "check_pairs", "resampled_widths", "seed_row", "side_rows", "summarise",
           "to_markdown", "width_table", "write_width"]
