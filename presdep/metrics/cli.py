"""`presdep metrics`: the metrics of one scorer's output, outside the workflow.

Input is either a ``scores`` Parquet file (all presentations, all perturbations)
or one TREC run per presentation (``--runs``). With runs, the presented order is
unknown, so Zeng PSI (which needs presented positions) is not computed, and the
retained-set threshold needs ``--canonical-run`` (first-stage order) or an
explicit ``--threshold``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from presdep.metrics.compute import CANONICAL, TASKS, compute_metrics, write_metrics
from presdep.schemas import read_table

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "metrics",
        help="nDCG, tau-PSI, Jaccard, flips of a scores file or of TREC runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scores", nargs="?", help="scores Parquet file (omit when --runs is given)")
    p.add_argument("--runs", nargs="+", metavar="RUN", help="one TREC run per presentation instead of SCORES")
    p.add_argument("--canonical-run", metavar="RUN", help="with --runs: the first-stage-order run (tunes t*)")
    p.add_argument("--perturbation", default="random_shuffle", help="with --runs: their perturbation name")
    p.add_argument("--qrels", required=True, help="qrels as Parquet or TREC text 'qid 0 docid grade'")
    p.add_argument("--dataset", required=True)
    p.add_argument("--task", default="rerank", choices=TASKS)
    p.add_argument("--variant", required=True)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threshold", type=float, default=None, help="frozen retained-set threshold (skips tuning)")
    p.add_argument("--answers", help="QA: answers Parquet (query_id, perturbation, presentation, answer)")
    p.add_argument("--gold", help="QA: gold answers Parquet (query_id, answer)")
    p.add_argument("--out", help="write the metrics table here (Parquet)")
    p.set_defaults(func=run)


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


def read_qrels_any(path: str | Path) -> pl.DataFrame:
    from presdep.data.trec import read_qrels

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"qrels file not found: {path}")
    return read_table(path, "qrels") if _is_parquet(path) else read_qrels(path)


def runs_to_scores(runs: list[str], perturbation: str, canonical: str | None = None) -> pl.DataFrame:
    """TREC runs -> a minimal scores table (query_id, doc_id, perturbation, presentation, score)."""
    from presdep.data.trec import read_run

    parts = []
    files = [(CANONICAL, 0, canonical)] if canonical else []
    files += [(perturbation, m, r) for m, r in enumerate(runs)]
    for pert, m, path in files:
        run = read_run(path)
        parts.append(
            run.select("query_id", "doc_id", "score").with_columns(
                perturbation=pl.lit(pert), presentation=pl.lit(m, dtype=pl.Int32)
            )
        )
    return pl.concat(parts)


def aggregate_table(metrics: pl.DataFrame) -> pl.DataFrame:
    """Aggregate rows as a perturbation x metric table."""
    agg = metrics.filter(pl.col("query_id").is_null())
    return agg.pivot(on="metric", index="perturbation", values="value", aggregate_function="first")


def run(args: argparse.Namespace) -> int:
    if bool(args.scores) == bool(args.runs):
        raise ValueError("give either a SCORES Parquet file or --runs RUN1 RUN2 ..., not both or neither")
    if args.runs:
        if args.task != "response" and args.canonical_run is None and args.threshold is None:
            raise ValueError(
                "--runs needs --canonical-run FILE (first-stage order, tunes the retained-set threshold) "
                "or --threshold T"
            )
        scores = runs_to_scores(args.runs, args.perturbation, args.canonical_run)
    else:
        scores = read_table(args.scores, "scores")
    qrels = read_qrels_any(args.qrels)
    answers = read_table(args.answers, "answers") if args.answers else None
    gold = read_table(args.gold, "answers_gold") if args.gold else None
    metrics = compute_metrics(
        scores,
        qrels,
        dataset=args.dataset,
        task=args.task,
        variant=args.variant,
        seed=args.seed,
        answers=answers,
        gold=gold,
        threshold=args.threshold,
    )
    with pl.Config(tbl_rows=-1, tbl_cols=-1, float_precision=4, tbl_hide_dataframe_shape=True):
        print(aggregate_table(metrics))
    if args.out:
        params = {
            k: v
            for k, v in vars(args).items()
            if k not in ("func",) and v is not None
        }
        write_metrics(metrics, args.out, params)
        log.info("wrote %s (%d rows)", args.out, metrics.height)
    return 0
