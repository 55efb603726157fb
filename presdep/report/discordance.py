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
from presdep.contracts.columns import TABLE1_COLUMNS, Table1Column
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_text_atomic
from presdep.metrics.rerank_rows import raised_flags
from presdep.report.contrasts import ANCHOR
from presdep.report.slot_following import SlotFollowing
from presdep.report.tables import dataset_means, load_metrics

log = logging.getLogger(__name__)

QUALITY, DECISION = "rerank_ndcg10", "rerank_jaccard"
# The like-for-like quality beside Table 1's first-stage pass: nDCG@10 over single shuffles.
SHUFFLE_MEAN = ANCHOR["rerank"]
SCHEMA = {"dataset": pl.String, "best_ndcg10": pl.String, "ndcg10": pl.Float64, "best_jaccard": pl.String,
          "jaccard": pl.Float64, "differ": pl.Boolean, "rows": pl.Int64, "degenerate": pl.String,
          "best_shuffle_mean": pl.String, "shuffle_mean": pl.Float64, "differ_shuffle_mean": pl.Boolean,
          "slot_copied": pl.String}


def default_rows(variants: Mapping[str, Variant]) -> list[str]:
    return list(dict.fromkeys(v.label for v in variants.values() if not v.skip and v.scorer != "identity"))


def per_dataset(metrics: pl.DataFrame, variants: Mapping[str, Variant], column: str | Table1Column) -> pl.DataFrame:
    """label, dataset, value: the column's aggregate row, mean over seeds."""
    labels = {n: v.label for n, v in variants.items()}
    spec = TABLE1_COLUMNS[column] if isinstance(column, str) else column
    means = dataset_means(metrics, spec, variants)
    return means.with_columns(pl.col("variant").replace_strict(labels).alias("label")).select("label", "dataset", "value")


def _best(recs: Sequence[Mapping], key: str, order: Mapping[str, int]) -> Mapping | None:
    """The record with the highest ``key`` (ties to config order); None when no record has one."""
    have = [r for r in recs if r.get(key) is not None]
    return max(have, key=lambda r: (r[key], -order[r["label"]])) if have else None


def discordance(metrics: pl.DataFrame, variants: Mapping[str, Variant],
                rows: Sequence[str] | None = None) -> tuple[pl.DataFrame, dict[str, float]]:
    """(per-collection table, summary): the summary holds differ, collections (those with a
    non-degenerate Jaccard to compare), left_out, the shuffle-mean reading's count, and each
    metric's row means' min, max and spread."""
    chosen = list(rows) if rows else default_rows(variants)
    known = {v.label for v in variants.values()}
    if unknown := sorted(set(chosen) - known):
        raise InvalidInput(f"discordance.rows: {unknown} are not Table 1 labels of this config ({sorted(known)})")
    order = {label: i for i, label in enumerate(chosen)}
    q = per_dataset(metrics, variants, QUALITY).filter(pl.col("label").is_in(chosen))
    j = per_dataset(metrics, variants, DECISION).filter(pl.col("label").is_in(chosen))
    m = per_dataset(metrics, variants, SHUFFLE_MEAN).filter(pl.col("label").is_in(chosen))
    both = q.join(j, on=["label", "dataset"], suffix="_j").join(m, on=["label", "dataset"], how="left", suffix="_m")
    flagged = raised_flags(metrics).filter(pl.col("task") == "rerank")
    degenerate = {(variants[v].label, d) for v, d in flagged.select("variant", "dataset").iter_rows() if v in variants}
    following = SlotFollowing(metrics)
    copies = {v.label for n, v in variants.items() if v.label in order and following.variant(n, "rerank")}
    out = []
    for (dataset,), g in sorted(both.group_by("dataset"), key=lambda kv: kv[0]):
        recs = sorted(g.iter_rows(named=True), key=lambda r: order[r["label"]])
        # A degenerate Jaccard measures the threshold rule, not the scorer: it does not compete.
        informative = [r for r in recs if (r["label"], dataset) not in degenerate]
        best_q, best_j, best_m = _best(recs, "value", order), _best(informative, "value_j", order), \
            _best(recs, "value_m", order)
        out.append({"dataset": dataset, "best_ndcg10": best_q["label"], "ndcg10": best_q["value"],
                    "best_jaccard": best_j and best_j["label"], "jaccard": best_j and best_j["value_j"],
                    "differ": None if best_j is None else best_q["label"] != best_j["label"], "rows": len(recs),
                    "degenerate": " ".join(sorted(r["label"] for r in recs if (r["label"], dataset) in degenerate)),
                    "best_shuffle_mean": best_m and best_m["label"], "shuffle_mean": best_m and best_m["value_m"],
                    "differ_shuffle_mean": None if best_j is None or best_m is None
                    else best_m["label"] != best_j["label"],
                    "slot_copied": "; ".join(sorted(r["label"] for r in recs if r["label"] in copies))})
    table = pl.DataFrame(out, schema=SCHEMA)
    means = both.group_by("label").agg(pl.col("value").mean().alias("q"), pl.col("value_j").mean().alias("j"))
    compared = table.filter(pl.col("differ").is_not_null())
    summary: dict[str, float] = {"differ": float(compared["differ"].sum()), "collections": float(compared.height),
                                 "left_out": float(table.height - compared.height), "rows": float(means.height),
                                 "copied": float(table.filter(pl.col("slot_copied") != "").height)}
    with_mean = compared.filter(pl.col("differ_shuffle_mean").is_not_null())
    summary.update({"differ_shuffle_mean": float(with_mean["differ_shuffle_mean"].sum()),
                    "collections_shuffle_mean": float(with_mean.height)})
    for key, col in (("ndcg10", "q"), ("jaccard", "j")):
        if means.height:
            lo, hi = float(means[col].min()), float(means[col].max())
            summary.update({f"{key}_min": lo, f"{key}_max": hi, f"{key}_spread": hi - lo})
    return table, summary


def sentence(summary: Mapping[str, float]) -> str:
    left = int(summary.get("left_out", 0))
    why = (f" {left} collection{'s are' if left != 1 else ' is'} left out: every chosen row's Jaccard there is "
           "degenerate (the threshold rule, not the scorer, sets it).") if left else ""
    if not summary.get("collections"):
        if left:
            return "No collection has a non-degenerate retained-set Jaccard to compare." + why
        return "No collection has both nDCG@10 and retained-set Jaccard for two or more of the chosen rows."
    text = (f"On {int(summary['differ'])} of {int(summary['collections'])} collections the row with the highest "
            "nDCG@10 is not the row with the most stable retained sets (highest non-degenerate Jaccard). Over the "
            f"{int(summary['rows'])} rows, mean nDCG@10 spans {summary['ndcg10_min']:.3f}-{summary['ndcg10_max']:.3f} "
            f"(spread {summary['ndcg10_spread']:.3f}) while mean Jaccard spans {summary['jaccard_min']:.3f}-"
            f"{summary['jaccard_max']:.3f} (spread {summary['jaccard_spread']:.3f}).")
    if summary.get("collections_shuffle_mean"):
        text += (f" On the shuffle-mean nDCG@10 (each row's mean over single shuffles) the best row is not the most "
                 f"stable on {int(summary['differ_shuffle_mean'])} of {int(summary['collections_shuffle_mean'])}.")
    return text + why


def to_markdown(table: pl.DataFrame, summary: Mapping[str, float]) -> str:
    lines = ["| collection | highest nDCG@10 (first-stage order) | nDCG@10 | highest Jaccard | Jaccard | differ | "
             "highest shuffle-mean nDCG@10 | shuffle mean | differ | rows |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.iter_rows(named=True):
        copied = " (copies the first stage)" if r["best_ndcg10"] in r["slot_copied"].split("; ") else ""
        lines.append(f"| {r['dataset']} | {r['best_ndcg10']}{copied} | {r['ndcg10']:.4f} | {r['best_jaccard'] or '-'} | "
                     f"{_fmt(r['jaccard'])} | {_yes(r['differ'])} | {r['best_shuffle_mean'] or '-'} | "
                     f"{_fmt(r['shuffle_mean'])} | {_yes(r['differ_shuffle_mean'])} | {r['rows']} |")
    if table.height == 0:
        lines = ["No collection to compare: no reranking collection has nDCG@10 and a retained-set Jaccard for the "
                 "chosen rows."]
    flagged = [f"{r['dataset']}: {r['degenerate']}" for r in table.iter_rows(named=True) if r["degenerate"]]
    note = ("\nDegenerate Jaccard (the threshold rule, not the scorer, sets it; table1.md says why; it does not "
            "compete for the highest Jaccard): " + "; ".join(flagged) + ".\n") if flagged else ""
    copied = [f"{r['dataset']}: {r['slot_copied'].replace('; ', ', ')}" for r in table.iter_rows(named=True)
              if r["slot_copied"]]
    if copied:
        note += (f"\nScores follow the slot (Table 1's slot flag), so the first-stage-order nDCG@10 copies the first "
                 f"stage; read the shuffle-mean columns for these rows: {'; '.join(copied)}.\n")
    return "\n".join(lines) + "\n\n" + sentence(summary) + "\n" + note


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _yes(x: bool | None) -> str:
    return "-" if x is None else ("yes" if x else "no")


def write_discordance(metrics_paths: Sequence[str | Path], variants: Mapping[str, Variant], out_csv: str | Path,
                      out_md: str | Path, rows: Sequence[str] | None = None) -> pl.DataFrame:
    """The discordance table as CSV and Markdown (rule ``discordance``)."""
    table, summary = discordance(load_metrics(metrics_paths), variants, rows)
    log.info("%s", sentence(summary))
    write_text_atomic(out_csv, table.write_csv(float_precision=6))
    write_text_atomic(out_md, to_markdown(table, summary))
    return table


__all__ = ["default_rows", "discordance", "per_dataset", "sentence", "to_markdown", "write_discordance"]
