"""``presdep stability`` and ``presdep export-report``: the bootstrap outside the workflow.

``register(subparsers)`` adds both sub-commands to an argparse sub-parser set; each
sets ``func`` to a callable taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from presdep import __version__
from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.errors import ReportError, SchemaError, StabilityError
from presdep.report.bootstrap import DEFAULT_LEVEL, DEFAULT_RESAMPLES, DEFAULT_SEED
from presdep.report.metric_columns import column_values
from presdep.report.run_reports import export_report
from presdep.report.stability_analysis import analyse_column
from presdep.report.stability_io import analyse_reports, read_metrics, write_stability_json
from presdep.report.stability_tiers import level_label, significantly_better


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "stability",
        help="paired bootstrap rank intervals of a leaderboard column",
        description="Paired (hierarchical) bootstrap over queries: rank intervals, P(first), "
        "pairwise P(A better than B), Rank(UB) and tiers of rows not separable at --level. "
        "REPORT = metrics Parquet files or JSON run reports.",
    )
    p.add_argument("reports", nargs="+", metavar="REPORT", type=Path)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"bootstrap seed (default {DEFAULT_SEED})")
    p.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                   help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})")
    p.add_argument("--level", type=float, default=DEFAULT_LEVEL,
                   help="level at which rows count as separable, for Rank(UB) and the tiers; per pair, "
                   "unadjusted for multiplicity (family-wise: raise it, e.g. Bonferroni 1 - 0.05/pairs) "
                   f"(default {DEFAULT_LEVEL})")
    p.add_argument("--svg", type=Path, help="write the rank-distribution figure here (1200x630 SVG)")
    p.add_argument("--json", type=Path, help="write the full result here")
    p.add_argument("--column", help="Table 1 column (metrics input; required when several have data) "
                   "or a label (report input)")
    p.add_argument("--lower-is-better", action="store_true",
                   help="rank ascending (report input; metrics columns know their direction)")
    p.add_argument("--presentations", type=Path,
                   help="Parquet with variant, seed, query_id, presentation, value: ranks per presentation")
    p.set_defaults(func=run_stability)

    e = subparsers.add_parser(
        "export-report",
        help="write a Table 1 column's per-query metrics as JSON run reports",
        description="One JSON run report per variant and seed: {model, seed, tasks: [{id, dataset, score}]}.",
    )
    e.add_argument("metrics", nargs="+", type=Path, metavar="METRICS.parquet")
    e.add_argument("--column", required=True, choices=list(TABLE1_COLUMNS))
    e.add_argument("--out", required=True, type=Path, help="output directory")
    e.set_defaults(func=run_export_report)


def _kind(paths: list[Path]) -> str:
    kinds = {".parquet": "metrics", ".json": "reports"}
    found = {}
    for p in paths:
        k = kinds.get(p.suffix.lower())
        if k is None:
            raise StabilityError(f"{p}: expected a metrics .parquet file or a JSON run report (.json)")
        found.setdefault(k, p)
    if len(found) > 1:
        raise StabilityError(f"do not mix metrics Parquet ({found['metrics']}) and JSON reports ({found['reports']})")
    return next(iter(found))


def _analyse(args: argparse.Namespace) -> tuple[str, dict]:
    per_pres = None
    if args.presentations is not None:
        per_pres = pl.read_parquet(args.presentations)
    if _kind(args.reports) == "metrics":
        metrics = read_metrics(args.reports)
        column = args.column
        if column is None:
            with_data = [c for c in TABLE1_COLUMNS if column_values(metrics, c).height]
            if len(with_data) != 1:
                raise StabilityError(
                    f"choose a column with --column; Table 1 columns with per-query rows: {with_data or 'none'}"
                )
            column = with_data[0]
        if column not in TABLE1_COLUMNS:
            raise StabilityError(f"--column {column!r} is not a Table 1 column: {list(TABLE1_COLUMNS)}")
        if args.lower_is_better and TABLE1_COLUMNS[column].direction != "lower":
            raise StabilityError(f"--lower-is-better contradicts column {column!r}, where higher is better")
        res = analyse_column(metrics, column, resamples=args.resamples, seed=args.seed,
                             per_presentation=per_pres, where=", ".join(map(str, args.reports)), level=args.level)
        return column, res
    label = args.column or "report"
    res = analyse_reports(args.reports, resamples=args.resamples, seed=args.seed,
                          lower_is_better=args.lower_is_better or None, label=label, per_presentation=per_pres,
                          level=args.level)
    return label, res


def _summary(label: str, res: dict) -> str:
    lines = [f"{label} ({res['direction']} is better): {res['sharedItems']} shared items, "
             f"{res['resamples']} resamples, seed {res['seed']}, mean Kendall tau-b "
             f"{'n/a' if res['meanKendallTau'] is None else format(res['meanKendallTau'], '.3f')}"]
    width = max(len(v) for v in [*res["variants"], *(res.get("flagged") or {})])
    lines.append(f"{'variant':<{width}}  rank  95% rank   mean    95% interval       P(first)  Rank(UB)  tier")
    for v in res["variants"]:
        lo, hi = res["meanInterval95"][v]
        rlo, rhi = res["rankInterval95"][v]
        lines.append(f"{v:<{width}}  {res['rank'][v]:4g}  [{rlo:g}, {rhi:g}]  {res['mean'][v]:.4f}  "
                     f"[{lo:.4f}, {hi:.4f}]  {res['probabilityFirst'][v]:.3f}     {res['rankUB'][v]:4d}  "
                     f"{res['tier'][v]:4d}")
    tiers = " | ".join(f"{k}: {', '.join(members)}" for k, members in enumerate(res["tiers"], start=1))
    lines.append(f"tiers at {level_label(res['tierLevel'])} (no row significantly better than another of its "
                 f"tier): {tiers}")
    lines.append(f"Rank(UB) and tiers: {res['multiplicity']}")
    for v, reasons in (res.get("flagged") or {}).items():
        lines.append(f"{v:<{width}}  left out (degenerate cell, not ranked): {'; '.join(reasons)}")
    lines.extend(_pairwise_lines(res))
    ps = res.get("promptSensitivity")
    if ps:
        lines.append(f"rank per prompt variant ({', '.join(ps['promptVariants'])}):")
        for v in res["variants"]:
            ranks = " ".join(f"{ps['ranks'][v][p]:g}" for p in ps["promptVariants"])
            lo, hi = ps["rankRange"][v]
            lines.append(f"{v:<{width}}  {ranks}  (range {lo:g}-{hi:g})")
    return "\n".join(lines)


def _preferred_side(a: str, b: str, interval: list[float], lower_is_better: bool) -> str | None:
    """The row that a 95% interval of mean_a - mean_b, excluding 0, favours; None when it includes 0."""
    # The tiers' own rule on the interval of a - b and on that of b - a ([-hi, -lo]): the same
    # rounding, so the words agree with the JSON's significantlyBetter at 95%.
    a_minus_b = np.asarray(interval, dtype=float).reshape(2, 1, 1)
    if significantly_better(a_minus_b, lower_is_better)[0, 0]:
        return a
    if significantly_better(-a_minus_b[::-1], lower_is_better)[0, 0]:
        return b
    return None


def _pairwise_lines(res: dict) -> list[str]:
    """One line per unordered pair of ranked rows, a above b in ranking order: a - b, its 95% interval,
    whether that interval excludes 0 and which row it favours; at a tier level other than 95% also
    whether the rows separate at that level (the JSON's significantlyBetter)."""
    variants, pairwise = res["variants"], res["pairwise"]
    pairs = [(a, b) for i, a in enumerate(variants) for b in variants[i + 1:]]
    if not pairs:
        return []
    level, lower = res["tierLevel"], res["direction"] == "lower"
    at_95 = level == DEFAULT_LEVEL
    criterion = "excludes 0 = significantly better" if at_95 else f"separable at {level_label(level)} as in the tiers"
    header = (f"pairwise at {level_label(level)} (row above - row below: difference of means [95% interval]; "
              f"{criterion}):")
    names = [f"{a} - {b}" for a, b in pairs]
    width = max(map(len, names))
    cells = [[_signed(pairwise[a][b]["difference"]), *(_signed(x) for x in pairwise[a][b]["differenceInterval95"])]
             for a, b in pairs]
    num = max(len(c) for row in cells for c in row)
    lines = [header]
    for name, (a, b), (diff, lo, hi) in zip(names, pairs, cells):
        cmp = pairwise[a][b]
        side = _preferred_side(a, b, cmp["differenceInterval95"], lower)
        verdict = "includes 0" if side is None else f"excludes 0 ({side} better)"
        if not at_95:
            winner = a if cmp["significantlyBetter"] else b if pairwise[b][a]["significantlyBetter"] else None
            verdict += f"; at {level_label(level)}: " + ("not separable" if winner is None else f"{winner} better")
        lines.append(f"{name:<{width}}  {diff:>{num}}  [{lo:>{num}}, {hi:>{num}}]  {verdict}")
    return lines


def _signed(x: float) -> str:
    """'+0.0123'; a difference that rounds to zero prints +0.0000, never -0.0000."""
    return format(round(x, 4) + 0.0, "+.4f")


def run_stability(args: argparse.Namespace) -> int:
    from presdep.report.stability_svg import write_stability_svg  # matplotlib only when drawing

    try:
        label, res = _analyse(args)
    except (StabilityError, ReportError, SchemaError, FileNotFoundError) as exc:
        print(f"presdep stability: error: {exc}", file=sys.stderr)
        return 2
    for w in res["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(_summary(label, res))
    if args.json is not None:
        write_stability_json({"presdepVersion": __version__, "columns": {label: res}, "skipped": {}}, args.json)
    if args.svg is not None:
        write_stability_svg(res, args.svg)
    return 0


def run_export_report(args: argparse.Namespace) -> int:
    try:
        paths = export_report(read_metrics(args.metrics), args.column, args.out)
    except (StabilityError, ReportError, SchemaError, FileNotFoundError) as exc:
        print(f"presdep export-report: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(paths)} report(s) to {args.out}")
    return 0
