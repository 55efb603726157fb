"""The verdict table: how often a frozen claim verifier changes its verdict when only the order of
the candidates its scorer saw changed (docs/methods/verdict-flip.md).

One row per (Table 1 label, collection, perturbation): each verdict metric's mean over claims,
then over training seeds; the verdict flip of each seed and its sample SD over seeds; the claims
judged and the DISPUTED claims left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from presdep.config.records import Variant
from presdep.contracts.schemas import write_text_atomic
from presdep.metrics.verdicts import PER_CLAIM, TASK
from presdep.report.tables import load_metrics

COUNTS = ("verdict_claims", "verdict_excluded_disputed")
COLUMNS = {  # metric -> column of the table
    "verdict_claims": "claims", "verdict_excluded_disputed": "disputed_excluded",
    "verdict_flip": "verdict_flip", "verdict_canonical_accuracy": "canonical_accuracy",
    "verdict_mean_accuracy": "mean_accuracy", "verdict_invalid_rate": "invalid_rate",
    "verdict_evidence_in_topk": "evidence_in_topk", "verdict_evidence_slot_mean": "evidence_slot_mean",
    "verdict_evidence_slot_var": "evidence_slot_var",
}
SEED_COLUMNS = ("verdict_flip_sd", "verdict_flip_by_seed")
KEYS = ("variant", "dataset", "perturbation")


def _seed_label(seed: int | None) -> str:
    return "none" if seed is None else str(seed)


def seed_spread(rows: pl.DataFrame) -> pl.DataFrame:
    """Per (variant, dataset, perturbation): the verdict flip's sample SD over seeds (ddof 1; null
    with one seed) and each seed's flip, ``"42: 0.100000; 43: ..."`` (an untrained row: ``none``)."""
    flips = rows.filter((pl.col("metric") == "verdict_flip") & pl.col("value").is_not_null())
    per_seed = flips.group_by(*KEYS, "seed").agg(pl.col("value").mean())
    out = []
    for keys, group in per_seed.group_by(*KEYS):
        group = group.sort("seed", nulls_last=True)
        values = group["value"].to_list()
        out.append({**dict(zip(KEYS, keys)),
                    "verdict_flip_sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                    "verdict_flip_by_seed": "; ".join(f"{_seed_label(s)}: {v:.6f}"
                                                      for s, v in zip(group["seed"].to_list(), values))})
    return pl.DataFrame(out, schema={"variant": pl.String, "dataset": pl.String, "perturbation": pl.String,
                                     "verdict_flip_sd": pl.Float64, "verdict_flip_by_seed": pl.String})


def verdict_table(metrics: pl.DataFrame, variants: Mapping[str, Variant]) -> pl.DataFrame:
    """label, dataset, perturbation, seeds, one column per verdict metric (seed means) and the
    verdict flip's spread over seeds (:func:`seed_spread`)."""
    rows = metrics.filter((pl.col("task") == TASK) & pl.col("query_id").is_null()
                          & pl.col("metric").is_in(list(COLUMNS)))
    order = {name: i for i, name in enumerate(variants)}
    per = (rows.group_by("variant", "dataset", "perturbation", "metric")
           .agg(pl.col("value").drop_nulls().mean(), pl.col("seed").n_unique().alias("seeds")))
    wide = per.pivot(on="metric", index=["variant", "dataset", "perturbation", "seeds"], values="value")
    for metric in COLUMNS:
        if metric not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(metric))
    wide = wide.join(seed_spread(rows), on=list(KEYS), how="left")
    wide = wide.with_columns(
        pl.col("variant").replace_strict({n: v.label for n, v in variants.items()}).alias("label"),
        pl.col("variant").replace_strict(order, return_dtype=pl.Int64).alias("_order"),
        *(pl.col(m).cast(pl.Int64) for m in COUNTS),
    )
    return (wide.sort("_order", "dataset", "perturbation")
            .select("label", "dataset", "perturbation", "seeds", *COLUMNS, *SEED_COLUMNS)
            .rename(COLUMNS))


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _seed_cells(by_seed: str | None) -> str:
    """``42: 0.100000; 43: ...`` shown at 3 decimals."""
    if not by_seed:
        return "-"
    return "; ".join(f"{s}: {float(v):.3f}" for s, v in (part.split(": ") for part in by_seed.split("; ")))


def to_markdown(table: pl.DataFrame, k: int | None = None) -> str:
    shown = table.filter(pl.col("perturbation") == "random_shuffle")
    top = f"top {k}" if k else "top k"
    lines = [f"| row | collection | claims | verdict flip | flip SD | flip per seed | canonical acc. | mean acc. "
             f"| invalid | evidence in {top} | evidence slot mean | slot var |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in shown.iter_rows(named=True):
        lines.append(f"| {r['label']} | {r['dataset']} | {r['claims']} | {_cell(r['verdict_flip'])} | "
                     f"{_cell(r['verdict_flip_sd'])} | {_seed_cells(r['verdict_flip_by_seed'])} | "
                     f"{_cell(r['canonical_accuracy'])} | {_cell(r['mean_accuracy'])} | {_cell(r['invalid_rate'])} | "
                     f"{_cell(r['evidence_in_topk'])} | {_cell(r['evidence_slot_mean'], 2)} | "
                     f"{_cell(r['evidence_slot_var'], 2)} |")
    excluded = sorted({(r["dataset"], r["disputed_excluded"]) for r in shown.iter_rows(named=True)})
    notes = ["", "Verdict flip = (M - modal verdict count) / M over the M shuffles of a claim (an invalid reply is "
             "its own verdict); accuracies against the gold verdict (canonical = shuffle 0); evidence = a judged "
             "relevant passage among the passages the reader saw, its slot 0-based. Means over claims, then seeds; "
             "flip SD = sample SD (ddof 1) of the seeds' verdict flips (- with one seed)."]
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


__all__ = ["COLUMNS", "PER_CLAIM", "SEED_COLUMNS", "seed_spread", "to_markdown", "verdict_table",
           "write_verdict_table"]
