"""Contrasts between Table 1 rows with intervals and an equivalence test (docs/methods/contrasts.md).

For two rows (Table 1 labels) and each column both fill, the paired hierarchical bootstrap of
their difference (presdep.report.contrast_bootstrap: seeds, then datasets, then queries; nested
by default, crossed as an option), its 95% interval, whether it excludes 0, TOST equivalence
within +-margin with its 90% interval, each seed's value with its own interval, the seed SD and
the gate reasons. The paper's pairs (``pairs: paper``): OC-SFT against every other trained row,
and every trained row against the base (off the shelf). Beside them the amortization terms of
each task's quality: the anchor is the K = 1 quality (``*_shuffle_mean``: nDCG over single
passes); R = the base's K = 10 order-averaged quality - its anchor; I = the ceiling - the base's
K = 10 quality (declared per dataset, else the largest per-dataset first-stage quality of any
row); recovered = a trained row's anchor - the base's anchor.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from presdep.config.records import Variant
from presdep.contracts.columns import COLUMN_TITLES, TABLE1_COLUMNS, Table1Column
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_text_atomic
from presdep.metrics.rerank_rows import DEGENERATE_METRICS, raised_flags
from presdep.report.contrast_bootstrap import ALPHA, Difference, Side, paired_difference
from presdep.report.slot_following import COPIED_NOTE, SlotFollowing
from presdep.report.tables import dataset_means, load_metrics

log = logging.getLogger(__name__)

# Per task: the K = 1 anchor and the K = 10 order-averaged quality (presdep.metrics.order_averaged).
_QUALITY = {"rerank": "ndcg10", "qa": "ndcg10", "response": "ndcg1"}
ANCHOR = {t: Table1Column(t, f"{q}_shuffle_mean", "random_shuffle", "higher") for t, q in _QUALITY.items()}
AVERAGED = {t: Table1Column(t, f"{q}_order_averaged", "random_shuffle", "higher") for t, q in _QUALITY.items()}
QUALITY_COLUMN = {s.task: c for c, s in TABLE1_COLUMNS.items() if s.metric.startswith("ndcg")}

SCHEMA = {"kind": pl.String, "a": pl.String, "b": pl.String, "column": pl.String, "difference": pl.Float64,
          "ci_low": pl.Float64, "ci_high": pl.Float64, "excludes_zero": pl.Boolean, "se": pl.Float64,
          "tost_p": pl.Float64, "equivalent": pl.Boolean, "datasets": pl.Int64, "queries": pl.Int64,
          "seeds_a": pl.Int64, "seeds_b": pl.Int64, "degenerate": pl.Boolean, "tost_low": pl.Float64,
          "tost_high": pl.Float64, "seed_values": pl.String, "seed_intervals": pl.String, "seed_sd": pl.Float64,
          "seed_sign_change": pl.Boolean, "gate": pl.String, "bootstrap_seed": pl.Int64, "slot_copied": pl.Boolean,
          "k_used": pl.String}
# Beside each quality contrast (Table 1's cell: one pass over the first-stage order) the same pair on
# the shuffle-mean quality, the like-for-like comparison where a row's scores follow the slot.
SHUFFLE_MEAN = "contrast shuffle-mean"
CONTRAST_KINDS = ("contrast", SHUFFLE_MEAN)
# The metric family of a column for contrasts.pair_seeds (the paper seeds quality and tau-PSI apart).
_SEED_FAMILY = {"ndcg@10": "quality", "ndcg@1": "quality"}


@dataclass(frozen=True)
class Settings:
    resamples: int = 10000
    seed: int = 0
    margin: float = 0.005
    design: str = "nested"
    pair_seeds: Mapping[str, int] = field(default_factory=dict)  # metric family -> the first pair's seed

    @classmethod
    def from_config(cls, section: Mapping) -> Settings:
        """From the config's validated ``contrasts`` section."""
        return cls(resamples=section["resamples"], seed=section["seed"], margin=section["margin"],
                   design=section["design"], pair_seeds=dict(section["pair_seeds"]))

    def seed_of(self, column: str, pair_index: int) -> int:
        """The bootstrap seed of the pair_index-th pair in a Table 1 column: pair_seeds' value of
        its metric + the index, else ``seed``."""
        metric = TABLE1_COLUMNS[column].metric
        first = self.pair_seeds.get(_SEED_FAMILY.get(metric, metric))
        return self.seed if first is None else first + pair_index


def _rows_of(metrics: pl.DataFrame, variants: Sequence[str], spec: Table1Column) -> pl.DataFrame:
    return metrics.filter(pl.col("variant").is_in(list(variants)) & (pl.col("task") == spec.task)
                          & (pl.col("metric") == spec.metric) & (pl.col("perturbation") == spec.perturbation)
                          & pl.col("query_id").is_not_null() & pl.col("value").is_not_null()
                          & pl.col("value").is_not_nan())


def sides(metrics: pl.DataFrame, a: Sequence[str], b: Sequence[str], spec_a: Table1Column,
          spec_b: Table1Column) -> tuple[Side, Side, int] | None:
    """The two sides on the (dataset, query) pairs every seed of both has; None without any."""
    ra, rb = _rows_of(metrics, a, spec_a), _rows_of(metrics, b, spec_b)
    if ra.height == 0 or rb.height == 0:
        return None
    ra, rb = (r.with_columns(pl.col("seed").fill_null(-1)) for r in (ra, rb))
    seeds_a, seeds_b = sorted(set(ra["seed"])), sorted(set(rb["seed"]))
    keys = None
    for rows, seeds in ((ra, seeds_a), (rb, seeds_b)):
        for s in seeds:
            have = set(rows.filter(pl.col("seed") == s).select("dataset", "query_id").iter_rows())
            keys = have if keys is None else keys & have
    if not keys:
        return None
    datasets = sorted({d for d, _ in keys})
    per_dataset = {d: sorted(q for dd, q in keys if dd == d) for d in datasets}

    def side(rows: pl.DataFrame, seeds: list[int]) -> Side:
        got = {(s, d, q): v for s, d, q, v in rows.select("seed", "dataset", "query_id", "value").iter_rows()}
        values = [np.array([[got[(s, d, q)] for q in per_dataset[d]] for s in seeds]) for d in datasets]
        return Side(values, tuple(None if s == -1 else s for s in seeds))

    return side(ra, seeds_a), side(rb, seeds_b), len(keys)


def _row(kind: str, a: str, b: str, column: str, pair: tuple[Side, Side, int] | None, st: Settings,
         degenerate: bool = False, seed: int | None = None, slot_copied: bool = False) -> dict | None:
    if pair is None:
        return None
    sa, sb, n = pair
    seed = st.seed if seed is None else seed
    try:
        d = paired_difference(sa, sb, resamples=st.resamples, seed=seed, margin=st.margin, design=st.design)
    except InvalidInput as e:
        raise InvalidInput(f"contrasts: {a} - {b} in {column}: {e}") from None
    return {"kind": kind, "a": a, "b": b, "column": column, "difference": d.estimate, "ci_low": d.low,
            "ci_high": d.high, "excludes_zero": d.excludes_zero, "se": d.se, "tost_p": d.tost_p,
            "equivalent": d.equivalent(ALPHA), "datasets": len(sa.values), "queries": n,
            "seeds_a": len(sa.seeds), "seeds_b": len(sb.seeds), "degenerate": degenerate, **_seed_columns(d),
            "bootstrap_seed": seed, "slot_copied": slot_copied, "k_used": None}


def _seed_columns(d: Difference) -> dict:
    """TOST's 90% interval, each training seed's value and own interval, their SD and the gate."""
    low, high = d.tost_interval
    return {"tost_low": low, "tost_high": high,
            "seed_values": "; ".join(f"{s.seed}: {s.value:+.6f}" for s in d.per_seed) or None,
            "seed_intervals": "; ".join(f"{s.seed}: [{s.low:+.6f}, {s.high:+.6f}]" for s in d.per_seed) or None,
            "seed_sd": d.seed_sd, "seed_sign_change": d.seed_sign_change, "gate": "; ".join(d.gate_reasons())}


def _degenerate(metrics: pl.DataFrame, variants: Sequence[str], column: str) -> bool:
    """Whether any of the row's variants has a degenerate-decision flag on this column's task
    (only the retained-set decision has them: presdep.metrics.rerank_rows)."""
    spec = TABLE1_COLUMNS[column]
    if spec.metric not in DEGENERATE_METRICS:
        return False
    hit = raised_flags(metrics).filter(pl.col("variant").is_in(list(variants)) & (pl.col("task") == spec.task))
    return hit.height > 0


def labels_of(variants: Mapping[str, Variant]) -> dict[str, list[str]]:
    """label -> its variants (a trained objective is one variant per task pool)."""
    out: dict[str, list[str]] = {}
    for name, v in variants.items():
        if not v.skip:
            out.setdefault(v.label, []).append(name)
    return out


# The order of the paper's OC-SFT contrasts (its bootstrap seeds are 100 + i and 200 + i, i the
# index): k10-SFT, permutation augmentation, DebiasFirst, k1-SFT; other objectives follow.
PAPER_OPPONENTS = ("order_averaged", "perm_aug", "debias_first", "single_order")


def paper_pairs(variants: Mapping[str, Variant], base: str | None) -> list[tuple[str, str]]:
    """OC-SFT against every other trained row (in the paper's order), then every trained row
    against the base (in the config's order)."""
    students = [v for v in variants.values() if v.student and not v.skip]
    trained = list(dict.fromkeys(v.label for v in students))

    def paper_rank(label: str) -> int:
        objective = next(v.student.objective for v in students if v.label == label)
        return PAPER_OPPONENTS.index(objective) if objective in PAPER_OPPONENTS else len(PAPER_OPPONENTS)

    focus = list(dict.fromkeys(v.label for v in students if v.student.objective == "oc_sft"))
    pairs = [(f, t) for f in focus for t in sorted(trained, key=paper_rank) if t != f]  # sorted is stable
    if base in variants and not variants[base].skip:
        pairs += [(t, variants[base].label) for t in trained]
    return pairs


def contrast_table(metrics: pl.DataFrame, variants: Mapping[str, Variant], pairs: Sequence[tuple[str, str]] | str,
                   base: str | None, settings: Settings, ceiling: Mapping[str, float] | None = None) -> pl.DataFrame:
    """Every pair's contrast in each column both rows fill, then the amortization terms (``base``
    None: no base row, so no base contrasts and no amortization terms)."""
    if base is not None and base not in variants:
        # The config's load refuses such a base; a name that matched nothing once gave an empty table.
        raise InvalidInput(f"contrasts.base: {base!r} is not a Table 1 variant of this config ({sorted(variants)})")
    by_label = labels_of(variants)
    if pairs == "paper":
        pairs = paper_pairs(variants, base)
    unknown = sorted({x for p in pairs for x in p} - set(by_label))
    if unknown:
        raise InvalidInput(f"contrasts.pairs: {unknown} are not Table 1 labels of this config ({sorted(by_label)})")
    out = []
    following = SlotFollowing(metrics)
    for i, (a, b) in enumerate(pairs):
        for column, spec in TABLE1_COLUMNS.items():
            flagged = _degenerate(metrics, by_label[a], column) or _degenerate(metrics, by_label[b], column)
            seed = settings.seed_of(column, i)
            if column not in QUALITY_COLUMN.values():
                out.append(_row("contrast", a, b, column, sides(metrics, by_label[a], by_label[b], spec, spec),
                                settings, flagged, seed))
                continue
            copied = following.any_of(by_label[a], spec.task) or following.any_of(by_label[b], spec.task)
            anchor = ANCHOR[spec.task]
            out.append(_row("contrast", a, b, column, sides(metrics, by_label[a], by_label[b], spec, spec),
                            settings, flagged, seed, copied))
            out.append(_row(SHUFFLE_MEAN, a, b, column, sides(metrics, by_label[a], by_label[b], anchor, anchor),
                            settings, False, seed, copied))
    if base in variants and not variants[base].skip:
        out += amortization(metrics, variants, by_label, base, settings, ceiling or {})
    return pl.DataFrame([r for r in out if r is not None], schema=SCHEMA)


def amortization(metrics: pl.DataFrame, variants: Mapping[str, Variant], by_label: Mapping[str, list[str]],
                 base: str, settings: Settings, ceiling: Mapping[str, float]) -> list[dict]:
    """R and I of the base and each trained row's recovered anchor, per task with data."""
    base_label = variants[base].label
    trained = list(dict.fromkeys(v.label for v in variants.values() if v.student and not v.skip))
    out = []
    for task in _QUALITY:
        column = QUALITY_COLUMN[task]
        k_used = shuffles_averaged(metrics, base, task)
        for row in (_row("amortization R", base_label, base_label, column,
                         sides(metrics, [base], [base], AVERAGED[task], ANCHOR[task]), settings),
                    _ceiling_row(metrics, base, base_label, task, ceiling)):
            if row is not None:
                out.append({**row, "k_used": k_used})
        for t in trained:
            out.append(_row("amortization recovered", t, base_label, column,
                            sides(metrics, by_label[t], [base], ANCHOR[task], ANCHOR[task]), settings))
    return [r for r in out if r is not None]


def shuffles_averaged(metrics: pl.DataFrame, variant: str, task: str) -> str | None:
    """The K the order-averaged quality used (min(K, M), presdep.metrics.order_averaged), as
    printed: one number, or the datasets' range where they differ."""
    ks = metrics.filter((pl.col("variant") == variant) & (pl.col("task") == task)
                        & (pl.col("metric") == "order_averaged_k") & pl.col("value").is_not_null())["value"]
    if ks.len() == 0:
        return None
    lo, hi = int(ks.min()), int(ks.max())
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _ceiling_row(metrics: pl.DataFrame, base: str, label: str, task: str, ceiling: Mapping[str, float]) -> dict | None:
    """I = ceiling - the base's K = 10 quality, mean over datasets (a point estimate: the ceiling is
    declared, or the largest per-dataset first-stage quality of any row, a maximum)."""
    averaged = dataset_means(metrics, AVERAGED[task], [base])
    if averaged.height == 0:
        return None
    observed = dataset_means(metrics, TABLE1_COLUMNS[QUALITY_COLUMN[task]]).group_by("dataset").agg(
        pl.col("value").max().alias("observed"))
    joined = averaged.join(observed, on="dataset", how="left")
    gaps = [ceiling.get(d, o) - v
            for d, v, o in joined.select("dataset", "value", "observed").iter_rows()]
    return {"kind": "amortization I", "a": "ceiling", "b": label, "column": QUALITY_COLUMN[task],
            "difference": float(np.mean(gaps)), "ci_low": None, "ci_high": None, "excludes_zero": None, "se": None,
            "tost_p": None, "equivalent": None, "datasets": len(gaps), "queries": None, "seeds_a": None,
            "seeds_b": None, "degenerate": False, "tost_low": None, "tost_high": None, "seed_values": None,
            "seed_intervals": None, "seed_sd": None, "seed_sign_change": None, "gate": None, "bootstrap_seed": None,
            "slot_copied": False, "k_used": None}


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:+.4f}"


def _title(r: Mapping) -> str:
    """A contrast's column as read: a quality column names its pass (the first-stage order, Table 1's
    cell, or the shuffle mean) and, where a row's scores follow the slot, which one to read."""
    title = COLUMN_TITLES[r["column"]]
    if r["column"] in QUALITY_COLUMN.values():
        shuffled = r["kind"] == SHUFFLE_MEAN
        title += " (shuffle mean" if shuffled else " (first-stage order"
        title += ("; read this" if shuffled else "; copies the first stage") if r["slot_copied"] else ""
        title += ")"
    return title + (" (degenerate)" if r["degenerate"] else "")


def to_markdown(table: pl.DataFrame, settings: Settings, *, empty_reason: str = "",
                shared_permutations: Sequence[str] = ()) -> str:
    """The contrasts as a table a reader can quote, then the amortization terms."""
    head = ("| a - b | column | difference | 95% interval | excludes 0 | TOST (+-{m}) | 90% interval | seed SD | "
            "gate | queries |\n|---|---|---|---|---|---|---|---|---|---|").format(m=settings.margin)
    contrasts = table.filter(pl.col("kind").is_in(CONTRAST_KINDS))
    lines = [head] if contrasts.height else [f"No contrasts: {empty_reason or 'no pair of rows shares a scored query'}."]
    for r in contrasts.iter_rows(named=True):
        sd = "" if r["seed_sd"] is None else f"{r['seed_sd']:.4f}"
        lines.append(f"| {r['a']} - {r['b']} | {_title(r)} | {_num(r['difference'])} | "
                     f"[{_num(r['ci_low'])}, {_num(r['ci_high'])}] | {'yes' if r['excludes_zero'] else 'no'} | "
                     f"{'equivalent' if r['equivalent'] else 'not shown'} (p = {r['tost_p']:.3g}) | "
                     f"[{_num(r['tost_low'])}, {_num(r['tost_high'])}] | {sd} | {r['gate'] or ''} | {r['queries']} |")
    copied = contrasts.filter(pl.col("slot_copied"))
    if copied.height:
        pairs = sorted({f"{a} - {b}" for a, b in copied.select("a", "b").iter_rows()})
        lines += ["", f"Copies the first stage: in {', '.join(pairs)}, a row's {COPIED_NOTE}. The first-stage-order "
                  "difference then compares how much each row copies the first stage, not what its scores add."]
    seeded = contrasts.filter(pl.col("seed_values").is_not_null())
    if seeded.height:
        lines += ["", "| a - b | column | each seed: value [its own 95% interval] |", "|---|---|---|"]
    for r in seeded.iter_rows(named=True):
        spans = (s.split(": ")[1] for s in r["seed_intervals"].split("; "))
        each = "; ".join(f"{v} {span}" for v, span in zip(r["seed_values"].split("; "), spans))
        lines.append(f"| {r['a']} - {r['b']} | {_title(r)} | {each} |")
    am = table.filter(pl.col("kind").str.starts_with("amortization"))
    if am.height == 0:
        lines += ["", "No amortization terms: the base row has no K = 1 anchor or order-averaged quality here."]
    else:
        lines += ["", "| term | row | column | value | 95% interval |", "|---|---|---|---|---|"]
    for r in am.iter_rows(named=True):
        term = r["kind"].removeprefix("amortization ")
        row = r["b"] if term in ("R", "I") else r["a"]
        term += f" (K = {r['k_used']})" if r["k_used"] else ""
        iv = f"[{_num(r['ci_low'])}, {_num(r['ci_high'])}]" if r["ci_low"] is not None else ""
        lines.append(f"| {term} | {row} | {COLUMN_TITLES[r['column']]} | {_num(r['difference'])} | {iv} |")
    if shared_permutations:
        lines += ["", conditional_note(shared_permutations)]
    seeds = f"seed {settings.seed}" + "".join(f", {metric} {first} + the pair's index"
                                             for metric, first in settings.pair_seeds.items())
    note = (f"\nPaired hierarchical bootstrap ({settings.design}: seeds, then datasets, then queries), "
            f"{settings.resamples} resamples, {seeds}; TOST at alpha {ALPHA} with the bootstrap SE, equivalence margin "
            f"+-{settings.margin}, its 90% interval; a seed's own interval is seeded with the bootstrap seed + the "
            "training seed; gate: why a difference is not read as a finding. Quality columns: Table 1's cell, one "
            "pass over the first-stage order, then the same pair on the mean over the shuffles. "
            "R: the base's order-averaged quality (each document's mean score over its first K = min(10, M) "
            "shuffles, K as used beside the term) minus its K = 1 anchor; I: the ceiling minus the base's "
            "order-averaged quality; recovered: a trained row's anchor minus the base's. (degenerate): a Jaccard "
            "cell the threshold rule, not the scorer, sets (table1.md says why) (docs/methods/contrasts.md).\n")
    return "\n".join(lines) + "\n" + note


def conditional_note(datasets: Sequence[str]) -> str:
    """Why an interval over queries cannot see which permutations were drawn, where queries share them."""
    return (f"Shared permutations ({', '.join(datasets)}): every query is read under the same M slot "
            "permutations (shuffle_rule paper or cyclic), so these intervals resample queries, not permutations: "
            "they are conditional on the M permutations drawn. A difference for a row whose scores follow the "
            "slot may belong to those permutations; protocol.shuffle_rule: per_query draws them per query and "
            "lets the query bootstrap see that variance.")


def empty_reason(variants: Mapping[str, Variant], pairs: Sequence[Sequence[str]] | str, base: str | None) -> str:
    """Why a config's contrasts have no pair, in words (a reason, not a blank table)."""
    if pairs != "paper":
        return "contrasts.pairs names no pair" if not pairs else "the chosen pairs share no scored (dataset, query)"
    if not paper_pairs(variants, base):
        return ("pairs: paper compares trained rows (OC-SFT with every other objective, each trained row with "
                "the base) and this config runs no trained row")
    return "the paper's pairs share no scored (dataset, query)"


def write_contrasts(metrics_paths: Sequence[str | Path], variants: Mapping[str, Variant], out_csv: str | Path,
                    out_md: str | Path, *, pairs: Sequence[Sequence[str]] | str = "paper",
                    base: str | None = "off_the_shelf", settings: Settings = Settings(),
                    ceiling: Mapping[str, float] | None = None, shared_permutations: Sequence[str] = ()) -> pl.DataFrame:
    """The contrasts table as CSV and Markdown (rule ``contrasts``); ``shared_permutations``: the
    datasets whose queries share their shuffles (their intervals are conditional on them)."""
    chosen = pairs if pairs == "paper" else [tuple(p) for p in pairs]
    table = contrast_table(load_metrics(metrics_paths), variants, chosen, base, settings, ceiling)
    log.info("%d contrasts and %d amortization terms", table.filter(pl.col("kind") == "contrast").height,
             table.filter(pl.col("kind") != "contrast").height)
    write_text_atomic(out_csv, table.write_csv(float_precision=6))
    write_text_atomic(out_md, to_markdown(table, settings, empty_reason=empty_reason(variants, chosen, base),
                                          shared_permutations=shared_permutations))
    return table


__all__ = ["ANCHOR", "AVERAGED", "CONTRAST_KINDS", "SHUFFLE_MEAN", "Settings", "conditional_note", "empty_reason",
           "shuffles_averaged", "amortization", "contrast_table", "labels_of", "paper_pairs",
           "sides", "to_markdown", "write_contrasts"]
