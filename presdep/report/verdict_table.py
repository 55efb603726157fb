"""The verdict table: how often a frozen claim verifier changes its verdict when only the order of
the candidates its scorer saw changed (docs/methods/verdict-flip.md).

One row per (Table 1 label, collection, perturbation): each verdict metric's mean over claims,
then over training seeds; the verdict flip of each seed and its sample SD over seeds; the claims
judged and the DISPUTED claims left out; the per-claim accuracy spread (the SD of the claims'
accuracies and the share of claims whose correctness depends on the order), likewise per seed with
its mean and sample SD over seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from presdep.config.records import Variant
from presdep.contracts.schemas import write_text_atomic
from presdep.metrics.verdicts import PER_CLAIM, SPREAD, TASK
from presdep.report.tables import load_metrics

COUNTS = ("verdict_claims", "verdict_excluded_disputed")
COLUMNS = {  # metric -> column of the table
    "verdict_claims": "claims", "verdict_excluded_disputed": "disputed_excluded",
    "verdict_flip": "verdict_flip", "verdict_canonical_accuracy": "canonical_accuracy",
    "verdict_mean_accuracy": "mean_accuracy", "verdict_invalid_rate": "invalid_rate",
    "verdict_evidence_in_topk": "evidence_in_topk", "verdict_evidence_slot_mean": "evidence_slot_mean",
    "verdict_evidence_slot_var": "evidence_slot_var",
}
SPREAD_COLUMNS = dict(zip(SPREAD, ("accuracy_spread", "order_dependent_share")))  # metric -> column
SEED_COLUMNS = ("verdict_flip_sd", "verdict_flip_by_seed")
# Appended after the older columns so their order in the CSV stays as it was.
SPREAD_SEED_COLUMNS = tuple(f"{column}{suffix}" for column in SPREAD_COLUMNS.values()
                            for suffix in ("", "_sd", "_by_seed"))
KEYS = ("variant", "dataset", "perturbation")


def _seed_label(seed: int | None) -> str:
    return "none" if seed is None else str(seed)


def seed_spread(rows: pl.DataFrame, metric: str = "verdict_flip", column: str = "verdict_flip") -> pl.DataFrame:
    """Per (variant, dataset, perturbation): a metric's sample SD over seeds (``<column>_sd``, ddof 1;
    null with one seed) and each seed's value (``<column>_by_seed``, ``"42: 0.100000; 43: ..."``; an
    untrained row: ``none``)."""
    values_of = rows.filter((pl.col("metric") == metric) & pl.col("value").is_not_null())
    per_seed = values_of.group_by(*KEYS, "seed").agg(pl.col("value").mean())
    out = []
    for keys, group in per_seed.group_by(*KEYS):
        group = group.sort("seed", nulls_last=True)
        values = group["value"].to_list()
        out.append({**dict(zip(KEYS, keys)),
                    f"{column}_sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                    f"{column}_by_seed": "; ".join(f"{_seed_label(s)}: {v:.6f}"
                                                   for s, v in zip(group["seed"].to_list(), values))})
    return pl.DataFrame(out, schema={"variant": pl.String, "dataset": pl.String, "perturbation": pl.String,
                                     f"{column}_sd": pl.Float64, f"{column}_by_seed": pl.String})


def verdict_table(metrics: pl.DataFrame, variants: Mapping[str, Variant]) -> pl.DataFrame:
    """label, dataset, perturbation, seeds, one column per verdict metric (seed means), the
    verdict flip's spread over seeds (:func:`seed_spread`), then the accuracy spread's two metrics,
    each with its seed mean, SD over seeds and per-seed values."""
    named = {**COLUMNS, **SPREAD_COLUMNS}
    rows = metrics.filter((pl.col("task") == TASK) & pl.col("query_id").is_null()
                          & pl.col("metric").is_in(list(named)))
    order = {name: i for i, name in enumerate(variants)}
    per = (rows.group_by("variant", "dataset", "perturbation", "metric")
           .agg(pl.col("value").drop_nulls().mean(), pl.col("seed").n_unique().alias("seeds")))
    wide = per.pivot(on="metric", index=["variant", "dataset", "perturbation", "seeds"], values="value")
    for metric in named:
        if metric not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(metric))
    for metric, column in {"verdict_flip": "verdict_flip", **SPREAD_COLUMNS}.items():
        wide = wide.join(seed_spread(rows, metric, column), on=list(KEYS), how="left")
    wide = wide.with_columns(
        pl.col("variant").replace_strict({n: v.label for n, v in variants.items()}).alias("label"),
        pl.col("variant").replace_strict(order, return_dtype=pl.Int64).alias("_order"),
        *(pl.col(m).cast(pl.Int64) for m in COUNTS),
    )
    return (wide.sort("_order", "dataset", "perturbation")
            .rename(named)
            .select("label", "dataset", "perturbation", "seeds", *COLUMNS.values(), *SEED_COLUMNS,
                    *SPREAD_SEED_COLUMNS))


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _seed_cells(by_seed: str | None) -> str:
    """``42: 0.100000; 43: ...`` shown at 3 decimals."""
    if not by_seed:
        return "-"
    return "; ".join(f"{s}: {float(v):.3f}" for s, v in (part.split(": ") for part in by_seed.split("; ")))


def _one_based(slot: float | None) -> float | None:
    """A mean slot as a person reads it (slot 1 = the first); the CSV keeps the 0-based contract."""
    return None if slot is None else slot + 1.0


def to_markdown(table: pl.DataFrame, k: int | None = None) -> str:
    shown = table.filter(pl.col("perturbation") == "random_shuffle")
    if shown.height == 0:
        return ("No verdict row: no reranking row here was read by the frozen reader over shuffles on a claim "
                "collection (verdict_reader.datasets; docs/methods/verdict-flip.md).\n")
    top = f"top {k}" if k else "top k"
    lines = [f"| row | collection | claims | verdict flip | flip SD | flip per seed | canonical acc. | mean acc. "
             f"| invalid | evidence in {top} | evidence slot mean | slot var | accuracy spread | spread SD "
             "| spread per seed | order-dependent | order-dependent SD | order-dependent per seed |",
             "|---" * 18 + "|"]
    for r in shown.iter_rows(named=True):
        lines.append(f"| {r['label']} | {r['dataset']} | {r['claims']} | {_cell(r['verdict_flip'])} | "
                     f"{_cell(r['verdict_flip_sd'])} | {_seed_cells(r['verdict_flip_by_seed'])} | "
                     f"{_cell(r['canonical_accuracy'])} | {_cell(r['mean_accuracy'])} | {_cell(r['invalid_rate'])} | "
                     f"{_cell(r['evidence_in_topk'])} | {_cell(_one_based(r['evidence_slot_mean']), 2)} | "
                     f"{_cell(r['evidence_slot_var'], 2)} | " + " | ".join(
                         f"{_cell(r[c])} | {_cell(r[c + '_sd'])} | {_seed_cells(r[c + '_by_seed'])}"
                         for c in SPREAD_COLUMNS.values()) + " |")
    excluded = sorted({(r["dataset"], r["disputed_excluded"]) for r in shown.iter_rows(named=True)})
    notes = ["", "Verdict flip = (M - modal verdict count) / M over the M shuffles of a claim (an invalid reply is "
             "its own verdict); accuracies against the gold verdict (canonical = shuffle 0); evidence = a judged "
             "relevant passage among the passages the reader saw, its slot numbered from 1 (the CSV's from 0). Means over claims, then seeds; "
             "flip SD = sample SD (ddof 1) of the seeds' verdict flips (- with one seed). Accuracy spread = "
             "sample SD (ddof 1) over claims of each claim's accuracy over its shuffles (an invalid reply is "
             "wrong); order-dependent = share of claims with that accuracy strictly between 0 and 1; both per "
             "seed, their mean and sample SD over seeds."]
    if excluded:
        notes.append("Claims with gold DISPUTED left out: " + "; ".join(f"{d}: {n}" for d, n in excluded) + ".")
    return "\n".join(lines) + "\n" + "\n".join(notes) + "\n"


def write_verdict_table(metrics_paths: Sequence[str | Path], variants: Mapping[str, Variant], out_csv: str | Path,
                        out_md: str | Path, k: int | None = None) -> pl.DataFrame:
    """The verdict table as CSV and Markdown (rule ``verdict_table``)."""
    table = verdict_table(load_metrics(metrics_paths), variants)
    write_text_atomic(out_csv, table.write_csv(float_precision=6))
    write_text_atomic(out_md, to_markdown(table, k))
    return table


__all__ = ["COLUMNS", "PER_CLAIM", "SEED_COLUMNS", "SPREAD_COLUMNS", "SPREAD_SEED_COLUMNS", "seed_spread",
           "to_markdown", "verdict_table", "write_verdict_table"]
