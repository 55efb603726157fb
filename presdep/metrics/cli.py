"""`presdep metrics`: the metrics of one scorer's output, outside the workflow.

Input is either a ``scores`` Parquet file (all presentations, all perturbations)
or one TREC run per presentation (``--runs``) plus ``--first-stage-run`` (the
one pass over the first-stage order, which gives the quality cells). With runs,
the presented order is unknown: ties are broken by the run's own order (score
descending, then doc id ascending) and Zeng PSI is not computed. Reranking tunes
t* on a development half of the queries (the sorted query ids shuffled by numpy's
default_rng(``--split-seed``), the first max(1, round(n/2))) over a grid spanning
every query's canonical scores, unless ``--threshold`` freezes it; the Jaccard
family is reported on the test half.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_table
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import RANDOM_SHUFFLE
from presdep.data.sniff import TREC_RUN, guess
from presdep.data.trec import read_qrels, read_run
from presdep.metrics.compute import TASKS, compute_metrics, write_metrics
from presdep.metrics.thresholds import SPLIT_RULE, SPLIT_SEED, split_queries, tune_thresholds

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
    p.add_argument("--first-stage-run", metavar="RUN", help="with --runs: the pass over the first-stage order")
    p.add_argument("--perturbation", default="random_shuffle", help="with --runs: their perturbation name")
    p.add_argument("--qrels", required=True, help="qrels as Parquet or TREC text 'qid 0 docid grade'")
    p.add_argument("--dataset", required=True)
    p.add_argument("--task", default="rerank", choices=TASKS)
    p.add_argument("--variant", required=True)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threshold", type=float, default=None, help="frozen retained-set threshold (skips tuning)")
    p.add_argument("--split-seed", type=int, default=SPLIT_SEED, help="seed of the 50/50 development/test split")
    p.add_argument("--bsc-k", type=int, default=1, help="BSC: shuffles averaged per ensemble (K)")
    p.add_argument("--bsc-ensembles", type=int, default=4, help="BSC: ensembles compared (E)")
    p.add_argument("--answers", help="QA: answers Parquet (query_id, perturbation, presentation, answer)")
    p.add_argument("--gold", help="QA: gold answers Parquet (query_id, answer)")
    p.add_argument("--out", help="write the metrics table here (Parquet)")
    p.set_defaults(func=run)


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


def read_scores_file(path: str | Path) -> pl.DataFrame:
    """A presdep scores Parquet; a text file (a TREC run, most often) is refused with what to do instead."""
    path = Path(path)
    if path.is_file() and not _is_parquet(path):
        with open(path, "rb") as fh:
            first = fh.readline(200).decode("utf-8", "replace").strip()
        if guess(first) == TREC_RUN:
            raise InvalidInput(f"{path}: a TREC run (line 1: {first[:80]!r}), not a presdep scores file: give TREC runs "
                               "as --runs RUN1 RUN2 ... (one per presentation) with --first-stage-run RUN")
        raise InvalidInput(f"{path}: not a Parquet file (line 1: {first[:80]!r}); SCORES is a scores file written by "
                           "presdep (results/scores/<run>/<dataset>.parquet), or give TREC runs with --runs")
    return read_table(path, "scores")


def read_qrels_any(path: str | Path) -> pl.DataFrame:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"qrels file not found: {path}")
    return read_table(path, "qrels") if _is_parquet(path) else read_qrels(path)


def runs_to_scores(runs: list[str], perturbation: str, first_stage: str) -> pl.DataFrame:
    """TREC runs -> a minimal scores table (query_id, doc_id, perturbation, presentation,
    position, score); position = rank in the run by (-score, doc id)."""
    parts = []
    files = [(FIRST_STAGE, 0, first_stage)] + [(perturbation, m, r) for m, r in enumerate(runs)]
    for pert, m, path in files:
        run = read_run(path).select("query_id", "doc_id", "score").sort(
            "query_id", pl.col("score"), "doc_id", descending=[False, True, False]
        )
        parts.append(
            run.with_columns(
                perturbation=pl.lit(pert), presentation=pl.lit(m, dtype=pl.Int32),
                position=pl.int_range(pl.len()).over("query_id").cast(pl.Int32),
            )
        )
    return pl.concat(parts)


def aggregate_table(metrics: pl.DataFrame) -> pl.DataFrame:
    """Aggregate rows, one (perturbation, metric, value) per line (v2 has too many metrics for columns)."""
    return metrics.filter(pl.col("query_id").is_null()).select("perturbation", "metric", "value")


def single_presentation_note(scores: pl.DataFrame) -> str | None:
    """The message for perturbations with fewer than two presentations (None when all have two or more).

    tau-PSI, the Jaccard family and the pair and selection flips compare presentations in
    pairs, so with M < 2 they are undefined and the metrics table holds nulls for them; the
    QA answer flip of one presentation is 0 (one answer cannot disagree with itself).
    """
    counts = (
        scores.filter(pl.col("perturbation") != FIRST_STAGE)
        .group_by("perturbation").agg(pl.col("presentation").n_unique().alias("m")).sort("perturbation")
    )
    short = [(r["perturbation"], r["m"]) for r in counts.iter_rows(named=True) if r["m"] < 2]
    if counts.height and not short:
        return None
    where = ", ".join(f"{p} has M = {m}" for p, m in short) or "no shuffled presentation at all"
    return (f"{where}: M < 2 leaves tau-PSI and Jaccard (and the flips) undefined, reported as null; "
            "give at least two presentations (two --runs, or a scores file with M >= 2)")


def run(args: argparse.Namespace) -> int:
    if bool(args.scores) == bool(args.runs):
        raise InvalidInput("give either a SCORES Parquet file or --runs RUN1 RUN2 ..., not both or neither")
    if args.runs:
        if args.first_stage_run is None:
            raise InvalidInput("--runs needs --first-stage-run FILE (the pass over the first-stage order)")
        scores = runs_to_scores(args.runs, args.perturbation, args.first_stage_run)
    else:
        scores = read_scores_file(args.scores)
    note = single_presentation_note(scores)
    if note:
        print(f"presdep metrics: warning: {note}", file=sys.stderr)
    thresholds = None
    if args.threshold is not None:
        # the queries tune_thresholds would split: those with shuffled presentations (the
        # first-stage pass may cover more queries than the shuffles do)
        shuffled = scores.filter(pl.col("perturbation") == RANDOM_SHUFFLE)["query_id"].cast(pl.String).unique()
        split_ids = shuffled if shuffled.len() else scores["query_id"].cast(pl.String).unique()
        dev, test = split_queries(split_ids.to_list(), args.split_seed)
        thresholds = {"t_star": args.threshold, "split_seed": args.split_seed, "split_rule": SPLIT_RULE,
                      "dev_queries": dev, "test_queries": test}
    qrels = read_qrels_any(args.qrels)
    if thresholds is None and args.task == "rerank":
        thresholds = tune_thresholds(scores, qrels, split_seed=args.split_seed, bsc_k=args.bsc_k,
                                     ensembles=args.bsc_ensembles)
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
        thresholds=thresholds,
        bsc_k=args.bsc_k,
        ensembles=args.bsc_ensembles,
        zeng=not args.runs,
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
