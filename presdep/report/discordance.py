"""Metric discordance: per collection, does the best-ranking row also make the most stable decisions?

Over a chosen set of Table 1 rows (default: every row but the identity scorer's, whose Jaccard
is 1 by construction), per reranking collection: the row with the highest nDCG@10 (first-stage
pass) and the row with the highest retained-set Jaccard, each a per-dataset mean over queries,
then over training seeds; ties go to the row first in config order. The count of collections
where the two differ, and over the rows the spread (max - min) of their mean nDCG@10 against the
spread of their mean Jaccard (docs/methods/discordance.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from presdep.config.records import Variant
from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_text_atomic
from presdep.metrics.rerank_rows import raised_flags
from presdep.report.tables import dataset_means, load_metrics

log = logging.getLogger(__name__)

QUALITY, DECISION = "rerank_ndcg10", "rerank_jaccard"
SCHEMA = {"dataset": pl.String, "best_ndcg10": pl.String, "ndcg10": pl.Float64, "best_jaccard": pl.String,
          "jaccard": pl.Float64, "differ": pl.Boolean, "rows": pl.Int64, "degenerate": pl.String}


def default_rows(variants: Mapping[str, Variant]) -> list[str]:
    return list(dict.fromkeys(v.label for v in variants.values() if not v.skip and v.scorer != "identity"))


def per_dataset(metrics: pl.DataFrame, variants: Mapping[str, Variant], column: str) -> pl.DataFrame:
    """label, dataset, value: the column's aggregate row, mean over seeds."""
    labels = {n: v.label for n, v in variants.items()}
    means = dataset_means(metrics, TABLE1_COLUMNS[column], variants)
    return means.with_columns(pl.col("variant").replace_strict(labels).alias("label")).select("label", "dataset", "value")


def discordance(metrics: pl.DataFrame, variants: Mapping[str, Variant],
                rows: Sequence[str] | None = None) -> tuple[pl.DataFrame, dict[str, float]]:
    """(per-collection table, summary): the summary holds differ, collections, and each metric's
    row means' min, max and spread."""
    chosen = list(rows) if rows else default_rows(variants)
    known = {v.label for v in variants.values()}
    if unknown := sorted(set(chosen) - known):
        raise InvalidInput(f"discordance.rows: {unknown} are not Table 1 labels of this config ({sorted(known)})")
    order = {label: i for i, label in enumerate(chosen)}
    q = per_dataset(metrics, variants, QUALITY).filter(pl.col("label").is_in(chosen))
    j = per_dataset(metrics, variants, DECISION).filter(pl.col("label").is_in(chosen))
    both = q.join(j, on=["label", "dataset"], suffix="_j")
    flagged = raised_flags(metrics).filter(pl.col("task") == "rerank")
    degenerate = {(variants[v].label, d) for v, d in flagged.select("variant", "dataset").iter_rows() if v in variants}
    out = []
    for (dataset,), g in sorted(both.group_by("dataset"), key=lambda kv: kv[0]):
        recs = sorted(g.iter_rows(named=True), key=lambda r: order[r["label"]])
        best_q = max(recs, key=lambda r: (r["value"], -order[r["label"]]))
        best_j = max(recs, key=lambda r: (r["value_j"], -order[r["label"]]))
        out.append({"dataset": dataset, "best_ndcg10": best_q["label"], "ndcg10": best_q["value"],
                    "best_jaccard": best_j["label"], "jaccard": best_j["value_j"],
                    "differ": best_q["label"] != best_j["label"], "rows": len(recs),
                    "degenerate": " ".join(sorted(r["label"] for r in recs if (r["label"], dataset) in degenerate))})
    table = pl.DataFrame(out, schema=SCHEMA)
    means = both.group_by("label").agg(pl.col("value").mean().alias("q"), pl.col("value_j").mean().alias("j"))
    summary: dict[str, float] = {"differ": float(table["differ"].sum()), "collections": float(table.height),
                                 "rows": float(means.height)}
    for key, col in (("ndcg10", "q"), ("jaccard", "j")):
        if means.height:
            lo, hi = float(means[col].min()), float(means[col].max())
            summary.update({f"{key}_min": lo, f"{key}_max": hi, f"{key}_spread": hi - lo})
    return table, summary


def sentence(summary: Mapping[str, float]) -> str:
    if not summary.get("collections"):
        return "No collection has both nDCG@10 and retained-set Jaccard for two or more of the chosen rows."
    return (f"On {int(summary['differ'])} of {int(summary['collections'])} collections the row with the highest "
            "nDCG@10 is not the row with the most stable retained sets (highest Jaccard). Over the "
            f"{int(summary['rows'])} rows, mean nDCG@10 spans {summary['ndcg10_min']:.3f}-{summary['ndcg10_max']:.3f} "
            f"(spread {summary['ndcg10_spread']:.3f}) while mean Jaccard spans {summary['jaccard_min']:.3f}-"
            f"{summary['jaccard_max']:.3f} (spread {summary['jaccard_spread']:.3f}).")


def to_markdown(table: pl.DataFrame, summary: Mapping[str, float]) -> str:
    lines = ["| collection | highest nDCG@10 | nDCG@10 | highest Jaccard | Jaccard | differ | rows |",
             "|---|---|---|---|---|---|---|"]
    for r in table.iter_rows(named=True):
        lines.append(f"| {r['dataset']} | {r['best_ndcg10']} | {r['ndcg10']:.4f} | {r['best_jaccard']} | "
                     f"{r['jaccard']:.4f} | {'yes' if r['differ'] else 'no'} | {r['rows']} |")
    flagged = [f"{r['dataset']}: {r['degenerate']}" for r in table.iter_rows(named=True) if r["degenerate"]]
    note = ("\nDegenerate Jaccard (the threshold rule, not the scorer, sets it; table1.md says why): "
            + "; ".join(flagged) + ".\n") if flagged else ""
    return "\n".join(lines) + "\n\n" + sentence(summary) + "\n" + note


def write_discordance(metrics_paths: Sequence[str | Path], variants: Mapping[str, Variant], out_csv: str | Path,
                      out_md: str | Path, rows: Sequence[str] | None = None) -> pl.DataFrame:
    """The discordance table as CSV and Markdown (rule ``discordance``)."""
    table, summary = discordance(load_metrics(metrics_paths), variants, rows)
    log.info("%s", sentence(summary))
    write_text_atomic(out_csv, table.write_csv(float_precision=6))
    write_text_atomic(out_md, to_markdown(table, summary))
    return table


__all__ = ["default_rows", "discordance", "per_dataset", "sentence", "to_markdown", "write_discordance"]
