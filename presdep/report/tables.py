"""The paper's Table 1 from metrics files: means over queries, then datasets, then seeds.

Each cell = mean over datasets of the per-dataset means over queries (within a
training seed), then the mean over seeds (trained rows). Besides the nine
headline columns the CSV carries the tie-aware ``*_tau_psi_b`` columns; the
counts file says, per cell, where it comes from, how many queries, datasets and
seeds it averages, the scoring passes per query it cost, the tie rate of tau-PSI
cells, and any degenerate-decision warning (named in table1.md's note and logged).
``results/bsc_curve.csv`` (its own rule, ``bsc_curve``) holds BSC's K-curve.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl

from presdep.config.records import Variant
from presdep.contracts.columns import COLUMN_TITLES, TABLE1_COLUMNS, Table1Column
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_table, write_text_atomic
from presdep.metrics.position_rows import POSITION_TEST_METRICS, slot_test_cells
from presdep.metrics.rerank_rows import (
    COUNTED_WARNINGS,
    DEGENERATE_FLAGS,
    DEGENERATE_METRICS,
    flag_place,
    raised_flags,
)
from presdep.report import counts_columns, diagnosis, flip_causes, table1_footnote, table1_notes
from presdep.report.slot_profiles import slot_profiles
from presdep.report.table1_notes import RowFacts

log = logging.getLogger(__name__)
# The methods pages, from the workflow's directory (the repository root), and their path from a
# results/table1.md that is not written by write_table1.
DOCS_DIR = "docs/methods"
DOCS = "../docs/methods/"

# Tie-aware tau-PSI beside the paper's (headline) strict tau-a form: in the CSV, not the bootstrap.
EXTRA_COLUMNS: dict[str, Table1Column] = {
    "rerank_tau_psi_b": Table1Column("rerank", "tau_psi_b", "random_shuffle", "lower"),
    "qa_tau_psi_b": Table1Column("qa", "tau_psi_b", "random_shuffle", "lower"),
    "resp_tau_psi_b": Table1Column("response", "tau_psi_b", "random_shuffle", "lower"),
}
# nDCG over the M shuffles beside each quality cell (its first-stage pass): per query the mean,
# worst and best shuffle, then the cell's mean over queries. In the CSV and each row's note.
SHUFFLED_QUALITY: dict[str, dict[str, str]] = {
    task: {f"{column}_shuffle_{part}": f"{spec.metric.replace('@', '')}_shuffle_{part}"
           for part in ("mean", "worst", "best")}
    for column, spec in TABLE1_COLUMNS.items() if spec.metric.startswith("ndcg")
    for task in (spec.task,)}
EXTRA_COLUMNS.update({column: Table1Column(task, metric, "random_shuffle", "higher")
                      for task, parts in SHUFFLED_QUALITY.items() for column, metric in parts.items()})
ALL_COLUMNS: dict[str, Table1Column] = {**TABLE1_COLUMNS, **EXTRA_COLUMNS}
TITLES = {**COLUMN_TITLES, "rerank_tau_psi": "tau-PSI (tau-a)", "qa_tau_psi": "QA tau-PSI (tau-a)",
          "resp_tau_psi": "Resp tau-PSI (tau-a)", "rerank_tau_psi_b": "tau-PSI-b",
          "qa_tau_psi_b": "QA tau-PSI-b", "resp_tau_psi_b": "Resp tau-PSI-b",
          **{c: f"{COLUMN_TITLES[c.rsplit('_shuffle_', 1)[0]]} over shuffles ({c.rsplit('_', 1)[1]})"
             for parts in SHUFFLED_QUALITY.values() for c in parts}}

_TAU_A = "headline: strict rankings (ties by presented position), Kendall tau-a over all M(M-1)/2 shuffle pairs"
_TAU_B = "not the headline: Kendall tau-b on raw scores (ties kept) over all shuffle pairs"
_QUALITY = ("first-stage pass (K = 1), ties by presented position; BSC: ensemble 0's BSC scores, ties by "
            "document id descending (trec_eval)")
SOURCES = {
    "rerank_ndcg10": _QUALITY,
    "rerank_tau_psi": _TAU_A,
    "rerank_jaccard": "test half of the 50/50 query split at t* tuned on the development half (shuffle 0); "
                      "mean pairwise Jaccard over the M shuffles",
    "qa_ndcg10": _QUALITY,
    "qa_tau_psi": _TAU_A,
    "qa_answer_flip": "reader on each shuffle's top-k paragraphs in score order; (M - modal count) / M",
    "resp_ndcg1": _QUALITY,
    "resp_tau_psi": _TAU_A,
    "resp_pair_flip": "(top, bottom) per shuffle, ties by (-score, response id ascending); 1 - modal count / M",
    "rerank_tau_psi_b": _TAU_B,
    "qa_tau_psi_b": _TAU_B,
    "resp_tau_psi_b": _TAU_B,
    **{c: f"per query the {c.rsplit('_', 1)[1]} over the M random shuffles of each shuffle's single-pass "
          "ranking (ties by presented position), then the mean over queries"
       for parts in SHUFFLED_QUALITY.values() for c in parts},
}
# The counts file's `warnings`, in this order: the degenerate-decision flags (keeps every / no
# candidate, t* at the grid's edge, mean retention above 0.90 / below 0.10, fewer than 10 test
# queries; presdep.metrics.rerank_rows states each threshold), then the counted ones (with their count).
_WARNINGS = {**DEGENERATE_FLAGS, **COUNTED_WARNINGS}


def load_metrics(paths: Iterable[str | Path]) -> pl.DataFrame:
    frames = [read_table(p, "metrics") for p in paths]
    if not frames:
        raise InvalidInput("no metrics files given")
    return pl.concat(frames, how="vertical")


def cell_values(metrics: pl.DataFrame, columns: Mapping[str, Table1Column] = ALL_COLUMNS) -> pl.DataFrame:
    """One value and its counts per (variant, column).

    Aggregate rows (query_id null) already hold the mean over a dataset's queries.
    Datasets are averaged within each seed, then seeds are averaged.
    """
    out = []
    for column, (task, metric, perturbation, _) in columns.items():
        per_query = metrics.filter(
            (pl.col("task") == task) & (pl.col("metric") == metric) & (pl.col("perturbation") == perturbation)
        )
        agg = per_query.filter(pl.col("query_id").is_null() & pl.col("value").is_not_null())
        if agg.height == 0:
            continue
        n_queries = (
            per_query.filter(pl.col("query_id").is_not_null() & pl.col("value").is_not_null())
            .group_by("variant", "dataset")
            .agg(pl.col("query_id").n_unique().alias("q"))
            .group_by("variant")
            .agg(pl.col("q").sum().alias("queries"))
        )
        seeded = agg.with_columns(pl.col("seed").fill_null(-1))
        by_seed = seeded.group_by("variant", "seed").agg(
            pl.col("value").mean().alias("value"), pl.col("dataset").n_unique().alias("datasets")
        )
        cell = by_seed.group_by("variant").agg(
            pl.col("value").mean().alias("value"),
            pl.col("datasets").max().alias("datasets"),
            pl.col("seed").n_unique().alias("seeds"),
        )
        cell = cell.join(n_queries, on="variant", how="left").with_columns(pl.lit(column).alias("column"))
        out.append(cell.select("variant", "column", "value", "queries", "datasets", "seeds"))
    if not out:
        return pl.DataFrame(schema={"variant": pl.String, "column": pl.String, "value": pl.Float64,
                                    "queries": pl.UInt32, "datasets": pl.UInt32, "seeds": pl.UInt32})
    return pl.concat(out, how="vertical_relaxed")


def dataset_means(metrics: pl.DataFrame, spec: Table1Column, variants: Iterable[str] | None = None) -> pl.DataFrame:
    """variant, dataset, value: a column's aggregate rows (the mean over a dataset's queries),
    then the mean over training seeds; only ``variants`` when given."""
    rows = metrics.filter((pl.col("task") == spec.task) & (pl.col("metric") == spec.metric)
                          & (pl.col("perturbation") == spec.perturbation) & pl.col("query_id").is_null()
                          & pl.col("value").is_not_null())
    if variants is not None:
        rows = rows.filter(pl.col("variant").is_in(list(variants)))
    return rows.group_by("variant", "dataset").agg(pl.col("value").mean())


def _aggregate(metrics: pl.DataFrame, variant: str, task: str, metric: str) -> pl.DataFrame:
    return metrics.filter(
        (pl.col("variant") == variant) & (pl.col("task") == task) & (pl.col("metric") == metric)
        & pl.col("query_id").is_null() & pl.col("value").is_not_null()
    )


def _passes(metrics: pl.DataFrame, variant: str, task: str) -> float | None:
    """Scoring passes per shuffled query: the first-stage pass plus M shuffles (BSC: E*K), never the
    K-curve's rows (their perturbations are bsc_curve_k*)."""
    rows = _aggregate(metrics, variant, task, "passes_per_query").filter(pl.col("perturbation") == "random_shuffle")
    return float(rows["value"].mean()) if rows.height else None


def threshold_warnings(metrics: pl.DataFrame, variant: str, task: str) -> str:
    """'dataset[seed]: reason; ...' for every degenerate-threshold flag raised ('' if none)."""
    out = []
    for metric, text in _WARNINGS.items():
        hit = _aggregate(metrics, variant, task, metric).filter(pl.col("value") > 0).sort("dataset", "seed")
        for r in hit.iter_rows(named=True):
            count = f" ({int(r['value'])})" if metric in COUNTED_WARNINGS else ""
            out.append(f"{flag_place(r['dataset'], r['seed'])}: {text}{count}")
    return "; ".join(out)


def degenerate_reasons(metrics: pl.DataFrame, variant: str, column: str) -> list[tuple[str, str, int | None]]:
    """(reason, dataset, seed) of every degenerate-decision flag raised for this cell
    (DEGENERATE_FLAGS); only cells of a DEGENERATE_METRICS metric (the retained-set decision at
    t*) can have any."""
    spec = ALL_COLUMNS[column]
    if spec.metric not in DEGENERATE_METRICS:
        return []
    hit = raised_flags(metrics).filter((pl.col("variant") == variant) & (pl.col("task") == spec.task))
    return [(DEGENERATE_FLAGS[r["metric"]], r["dataset"], r["seed"]) for r in hit.iter_rows(named=True)]


def degenerate_note(column: str, reasons: Sequence[tuple[str, str, int | None]]) -> str:
    """The note of a degenerate cell, e.g. 'Jacc. degenerate: t* keeps every candidate (dl19)';
    datasets only (the counts file's warnings name the seeds); '' when nothing was raised."""
    by_reason: dict[str, list[str]] = {}
    for reason, dataset, _ in reasons:
        places = by_reason.setdefault(reason, [])
        if dataset not in places:
            places.append(dataset)
    order = list(DEGENERATE_FLAGS.values())
    parts = [f"{reason} ({', '.join(sorted(places))})"
             for reason, places in sorted(by_reason.items(), key=lambda kv: order.index(kv[0]))]
    return f"{COLUMN_TITLES.get(column, column)} degenerate: " + "; ".join(parts) if parts else ""


def _drop_tau_psi(row: dict) -> None:
    """A scorer whose capability record says integer_grades ties so often that a ranking's order is
    mostly tie-breaking: its tau-PSI is not reported (as in the paper's hosted row); its note says so."""
    for column, spec in ALL_COLUMNS.items():
        if spec.metric in ("tau_psi", "tau_psi_b"):
            row[column] = None


def merge_rows_by_label(rows: Sequence[dict]) -> list[dict]:
    """One row per label: variants that share a label and fill disjoint columns are one row.

    A trained objective is one student per task pool (its reranking, QA and response
    cells come from different students), configured as variants with one label. Two
    variants of one label that fill the same column are a config error: which would
    the table show?
    """
    merged: dict[str, dict] = {}
    for row in rows:
        into = merged.get(row["label"])
        if into is None:
            merged[row["label"]] = dict(row)
            continue
        clash = [c for c in ALL_COLUMNS if row[c] is not None and into[c] is not None]
        if clash:
            raise InvalidInput(f"variants {into['variant']!r} and {row['variant']!r} share the label "
                             f"{row['label']!r} and both fill {clash}; give them different labels")
        for c in ALL_COLUMNS:
            if row[c] is not None:
                into[c] = row[c]
        into["variant"] = f"{into['variant']}+{row['variant']}"
        notes = [n for n in (into["note"], row["note"]) if n]
        into["note"] = "; ".join(dict.fromkeys(notes))
        if "facts" in into:
            into["facts"] = into["facts"].merged(row["facts"], into)
    return list(merged.values())


# Beside each tau-PSI cell: the same cell of tau_psi_noise (protocol.noise_rereads), the tau-PSI
# that arithmetic alone gives when the identical presentation is read in other batches.
_NOISE_COLUMNS = {column: Table1Column(spec.task, "tau_psi_noise", spec.perturbation, spec.direction)
                  for column, spec in ALL_COLUMNS.items() if spec.metric == "tau_psi"}
# Beside each tau-PSI cell (tau-a and tau-b): the same cell of tie_rate, the share of tied document
# pairs per presentation (presdep.metrics.compute.tie_rate), the pairs tau-a orders by position.
_TIE_COLUMNS = {column: Table1Column(spec.task, "tie_rate", spec.perturbation, spec.direction)
                for column, spec in ALL_COLUMNS.items() if spec.metric in ("tau_psi", "tau_psi_b")}
# Each headline tau-PSI column and its tau-b column (shown beside it in table1.md when it ties).
_TAU_B_OF = {column: b for column, spec in TABLE1_COLUMNS.items() if spec.metric == "tau_psi"
             for b, sb in EXTRA_COLUMNS.items() if sb.task == spec.task and sb.metric == "tau_psi_b"}


def _tie_facts(name: str, variant: Variant, row: Mapping, tie: Mapping[str, float | None], facts: RowFacts) -> None:
    """The row's tied tau-PSI cells (tau-b beside tau-a in table1.md) and the WARNING for a scorer that
    declares order_invariant yet has tau-PSI > 0 from tied scores broken by presented position."""
    tied = {c: r for c, r in tie.items() if c in _TAU_B_OF and row.get(c) is not None and r is not None and r > 0}
    facts.ties.extend(tied)
    if not variant.capabilities.order_invariant:
        return
    for column, tau_b_column in _TAU_B_OF.items():
        tau_a, tau_b = row.get(column), row.get(tau_b_column)
        if tau_a is not None and tau_a > 0 and ((tau_b is not None and tau_b == 0) or column in tied):
            log.warning("%s %s: scorer %r declares order_invariant; its tau-PSI > 0 comes from tied scores "
                        "broken by presented position (tau-PSI %.4g, tau-PSI-b %s, tie rate %s)", name, column,
                        variant.scorer, tau_a, _fmt(tau_b) or "undefined", _fmt(tie.get(column)) or "n/a")
            facts.tie_broken.append(column)


def _flips_by_label(counts: pl.DataFrame, variants: Mapping[str, Variant]) -> dict[str, dict[str, dict]]:
    """label -> {decision column: its flips and cause shares} from the counts file."""
    out: dict[str, dict[str, dict]] = {}
    hit = counts.filter(pl.col("column").is_in(list(flip_causes.DECISION_OF)) & pl.col("flips").is_not_null())
    for r in hit.iter_rows(named=True):
        if r["variant"] in variants:
            out.setdefault(variants[r["variant"]].label, {})[r["column"]] = {c: r[c] for c in flip_causes.CAUSE_COLUMNS}
    return out


def _tie_rates_by_label(counts: pl.DataFrame, variants: Mapping[str, Variant]) -> dict[str, dict[str, float]]:
    """label -> {tau-PSI column: tie rate > 0} from the counts file (rows of table1.md are labels)."""
    out: dict[str, dict[str, float]] = {}
    if "tie_rate" not in counts.columns:
        return out
    hit = counts.filter(pl.col("column").is_in(list(_TAU_B_OF)) & (pl.col("tie_rate") > 0))
    for r in hit.iter_rows(named=True):
        if r["variant"] in variants:
            out.setdefault(variants[r["variant"]].label, {})[r["column"]] = r["tie_rate"]
    return out


def build_table1(metrics: pl.DataFrame, variants: Mapping[str, Variant]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(table, counts): one row per configured variant in config order; skipped ones keep their reason.
    Each row's note is its verdict, then its flags (presdep.report.table1_notes); ``flags`` lists the
    flag keys the note uses, for the legend under table1.md."""
    cells = cell_values(metrics)
    noise = cell_values(metrics, _NOISE_COLUMNS)
    ties = cell_values(metrics, _TIE_COLUMNS)
    diag = {m: cell_values(metrics, diagnosis.diagnostic_columns(m)) for m in diagnosis.DIAGNOSTICS}
    slot_tests = slot_test_cells(metrics, POSITION_TEST_METRICS)
    profiles = slot_profiles(metrics)
    ledgers = flip_causes.ledger_counts(metrics)
    rows, counts = [], []
    for name, v in variants.items():
        row: dict = {"variant": name}
        facts = RowFacts(values=row, integer_grades=v.capabilities.integer_grades)
        for column, spec in ALL_COLUMNS.items():
            hit = cells.filter((pl.col("variant") == name) & (pl.col("column") == column))
            row[column] = float(hit["value"][0]) if hit.height else None
            if hit.height:
                warn = threshold_warnings(metrics, name, spec.task) if spec.metric in DEGENERATE_METRICS else ""
                degenerate = degenerate_reasons(metrics, name, column)
                if degenerate:  # on the terminal: the table1 job's warnings reach the console
                    facts.degenerate[column] = [(reason, dataset) for reason, dataset, _ in degenerate]
                    facts.test_queries[column] = int(hit["queries"][0] or 0)
                    log.warning("%s %s is degenerate: %s", name, column, warn)
                elif warn:
                    log.warning("%s %s: %s", name, column, warn)
                slot_counts = _slot_counts(slot_tests, name, column)
                counts.append({"variant": name, "column": column, "metric": spec.metric,
                               "perturbation": spec.perturbation, "better": spec.direction,
                               "queries": int(hit["queries"][0] or 0), "datasets": int(hit["datasets"][0]),
                               "seeds": int(hit["seeds"][0]), "passes_per_query": _passes(metrics, name, spec.task),
                               "tau_psi_noise": _noise_cell(noise, name, column),
                               "tie_rate": _noise_cell(ties, name, column),
                               **_diagnostic_counts(diag, name, column, row[column]),
                               **slot_counts, **flip_causes.cell_causes(ledgers, name, column),
                               "source": SOURCES[column], "warnings": warn})
                if column in diagnosis.TAU_PSI_COLUMNS and not v.capabilities.integer_grades:
                    said = diagnosis.findings(row[column], {**{m: _noise_cell(d, name, column) for m, d in diag.items()},
                                                            **slot_counts})
                    _add_findings(facts, column, said, profiles.get((name, spec.task)))
        for task, parts in SHUFFLED_QUALITY.items():
            facts.shuffled[task] = tuple(row[c] for c in parts)
        row["label"] = v.label
        row["note"] = f"skipped: {v.skip}" if v.skip else str(v.spec.get("note", ""))
        if v.capabilities.integer_grades:
            _drop_tau_psi(row)
        _tie_facts(name, v, row, {c: _noise_cell(ties, name, c) for c in _TAU_B_OF}, facts)
        row["facts"] = facts
        rows.append(row)
    merged = merge_rows_by_label(rows)
    for row in merged:
        row["facts"].values = row
        row["note"], row["flags"] = table1_notes.note(row.pop("facts"), lead=row["note"])
        row["flags"] = " ".join(f.replace(" ", "_") for f in row["flags"])
    schema = {"variant": pl.String, **{c: pl.Float64 for c in ALL_COLUMNS}, "label": pl.String, "note": pl.String,
              "flags": pl.String}
    table = pl.DataFrame(merged, schema=schema)
    return table, pl.DataFrame(counts, schema=counts_columns.schema())


def _add_findings(facts: RowFacts, column: str, said: set[str], profile: tuple[int, float] | None) -> None:
    """A tau-PSI cell's diagnostics as the row's flags; a slot effect names its slot (the slot
    profile's largest centred mean) when the metrics hold a profile."""
    if "chance" in said:
        facts.chance.append(column)
    if "slot" in said:
        facts.slots[column] = profile or (0, 0.0)
    if "no grade signal" in said:
        facts.no_grade.append(column)
    if "against the qrels" in said:
        facts.against_qrels.append(column)


def _diagnostic_counts(diag: Mapping[str, pl.DataFrame], variant: str, column: str,
                       value: float | None) -> dict[str, float | None]:
    """The counts file's diagnostics of a cell: for a headline tau-PSI cell the chance level, the
    distance from it and the position diagnostics (docs/methods/position.md); else empty."""
    if column not in diagnosis.TAU_PSI_COLUMNS:
        return {"chance": None, "vs_chance": None, **{m: None for m in diag}}
    return {"chance": diagnosis.CHANCE_TAU_PSI, "vs_chance": diagnosis.vs_chance(value),
            **{m: _noise_cell(d, variant, column) for m, d in diag.items()}}


def _slot_counts(tests: pl.DataFrame, variant: str, column: str) -> dict[str, float | None]:
    """A headline tau-PSI cell's slot test (chance level of the slot share, permutation p-value) and
    score-grade test p-value (docs/methods/position.md); None for other cells."""
    if column not in diagnosis.TAU_PSI_COLUMNS:
        return {"slot_share_chance": None, "slot_p_value": None, diagnosis.GRADE_P_VALUE: None}
    task = TABLE1_COLUMNS[column].task
    return {**diagnosis.slot_test_cell(tests, variant, task), **diagnosis.grade_test_cell(tests, variant, task)}


def _noise_cell(noise: pl.DataFrame, variant: str, column: str) -> float | None:
    hit = noise.filter((pl.col("variant") == variant) & (pl.col("column") == column))
    return float(hit["value"][0]) if hit.height else None


def bsc_curve(metrics: pl.DataFrame) -> pl.DataFrame:
    """BSC's K-curve (perturbations bsc_curve_k{K}, rule "fixed") and adaptive BSC beside it
    (bsc_adaptive_r{r}, rule "adaptive": shuffles added until the decision holds for r additions,
    docs/methods/bsc.md): variant, task, rule, K, r, metric, value (mean over datasets within a
    seed, then over seeds), datasets, seeds. K is null on adaptive rows, r on fixed ones."""
    schema = {"variant": pl.String, "task": pl.String, "rule": pl.String, "K": pl.Int64, "r": pl.Int64,
              "metric": pl.String, "value": pl.Float64, "datasets": pl.Int64, "seeds": pl.Int64}
    if metrics.height == 0:
        return pl.DataFrame(schema=schema)
    pert = pl.col("perturbation")
    m = metrics.filter(
        (pert.str.starts_with("bsc_curve_k") | pert.str.starts_with("bsc_adaptive_r")) & pl.col("query_id").is_null()
        & pl.col("value").is_not_null()
    )
    if m.height == 0:
        return pl.DataFrame(schema=schema)
    fixed = pert.str.starts_with("bsc_curve_k")
    m = m.with_columns(
        pl.when(fixed).then(pl.lit("fixed")).otherwise(pl.lit("adaptive")).alias("rule"),
        pl.when(fixed).then(pert.str.strip_prefix("bsc_curve_k")).cast(pl.Int64, strict=False).alias("K"),
        pl.when(~fixed).then(pert.str.strip_prefix("bsc_adaptive_r")).cast(pl.Int64, strict=False).alias("r"),
        pl.col("seed").fill_null(-1))
    keys = ["variant", "task", "rule", "K", "r", "metric"]
    by_seed = m.group_by(*keys, "seed").agg(pl.col("value").mean(), pl.col("dataset").n_unique().alias("datasets"))
    out = by_seed.group_by(*keys).agg(pl.col("value").mean(), pl.col("datasets").max(),
                                      pl.col("seed").n_unique().alias("seeds"))
    return out.select(list(schema)).cast(schema).sort("variant", "task", "rule", "K", "r", "metric",
                                                      descending=[False, False, True, False, False, False],
                                                      nulls_last=True)


def _fmt(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def _cell_text(row: Mapping, column: str, tied: Mapping[str, float]) -> str:
    """A cell's text; a tau-PSI cell of a run with ties (tie rate > 0) shows its tau-b beside it."""
    text = _fmt(row[column])
    if text and column in _TAU_B_OF and tied.get(column, 0) > 0:
        text += f" (tau-b {_fmt(row[_TAU_B_OF[column]]) or 'undefined'})"
    return text


def to_markdown(table: pl.DataFrame, columns: Sequence[str] | None = None,
                skipped_datasets: Mapping[str, str] | None = None, departures: Sequence[str] = (),
                tie_rates: Mapping[str, Mapping[str, float]] | None = None,
                flips: Mapping[str, Mapping[str, Mapping[str, float | None]]] | None = None,
                footnote: str = "", docs: str = DOCS) -> str:
    """Table 1 as Markdown: task columns that no variant filled are left out; under the table the
    ``footnote`` (presdep.report.table1_footnote: the run's design and the methods pages), the legend
    of the flags the notes use, why decisions flipped, the datasets that could not be used here
    with their reason and every non-paper protocol rule the run used (``departures``).
    ``tie_rates`` (label -> {tau-PSI column: tie rate}): those tau-PSI cells show their tau-b beside
    them. ``docs``: the path from table1.md to docs/methods/."""
    cols = [c for c in (columns or TABLE1_COLUMNS) if table[c].is_not_null().any()]
    header = ["Variant", *[TITLES[c] for c in cols], "Note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.iter_rows(named=True):
        tied = (tie_rates or {}).get(row["label"], {})
        cells = [row["label"], *[_cell_text(row, c, tied) for c in cols], row["note"] or ""]
        lines.append("| " + " | ".join(cells) + " |")
    used = [f.replace("_", " ") for flags in table["flags"].drop_nulls() for f in flags.split()] \
        if "flags" in table.columns else []
    legend = table1_notes.legend(used, docs)
    skipped = "".join(f"\nSkipped dataset {name}: {reason}\n" for name, reason in (skipped_datasets or {}).items())
    rules = "".join(f"\nNot the paper's protocol: {d}.\n" for d in departures)
    why = flip_causes.causes_line(flips or {}, cols, docs)
    return "\n".join(lines) + "\n" + footnote + legend + why + skipped + rules


def _read_metrics(metrics_paths: Iterable[str | Path]) -> pl.DataFrame:
    """Every metrics file concatenated; an empty metrics table when none is given."""
    paths = list(metrics_paths)
    return load_metrics(paths) if paths else _empty_metrics()


def write_table1(metrics_paths: Iterable[str | Path], variants: Mapping[str, Variant],
                 out_csv: str | Path, out_md: str | Path, out_counts: str | Path,
                 skipped_datasets: Mapping[str, str] | None = None, departures: Sequence[str] = ()) -> pl.DataFrame:
    """Table 1 as CSV and Markdown, and its counts file (rule ``table1``)."""
    metrics = _read_metrics(metrics_paths)
    table, counts = build_table1(metrics, variants)
    docs = os.path.relpath(Path(DOCS_DIR).resolve(), Path(out_md).resolve().parent).replace(os.sep, "/") + "/"
    note = table1_footnote.footnote(
        table1_footnote.design(metrics, [n for n, v in variants.items() if v.bsc_k > 1]),
        table1_footnote.query_counts(counts), docs)
    for name, reason in (skipped_datasets or {}).items():
        log.warning("dataset %s is not in Table 1: %s", name, reason)
    write_text_atomic(out_csv, table.write_csv(float_precision=6))
    for d in departures:
        log.warning("not the paper's protocol: %s", d)
    write_text_atomic(out_md, to_markdown(table, skipped_datasets=skipped_datasets, departures=departures,
                                          tie_rates=_tie_rates_by_label(counts, variants),
                                          flips=_flips_by_label(counts, variants), footnote=note, docs=docs))
    write_text_atomic(out_counts, counts.write_csv())
    return table


def write_bsc_curve(metrics_paths: Iterable[str | Path], out_csv: str | Path) -> pl.DataFrame:
    """BSC's K-curve as CSV (rule ``bsc_curve``); a header only when no variant has one."""
    curve = bsc_curve(_read_metrics(metrics_paths))
    write_text_atomic(out_csv, curve.write_csv(float_precision=6))
    return curve


def _empty_metrics() -> pl.DataFrame:
    return pl.DataFrame(schema={"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
                                "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64})
