"""From a ``scores`` table (+ qrels, answers, the threshold artifact) to the long
``metrics`` table (docs/methods/README.md: one page per metric).

Perturbations are never pooled: every perturbation in ``scores`` gets its own
rows. Quality cells come from the first-stage pass (perturbation
``first_stage``); decision metrics compare the decision presentations of
presdep.contracts.views (shuffles, or BSC ensembles), canonical = presentation 0. Every
ranking is strict, ties broken by presented position (first shown wins).
Per-query rows carry the query id; the aggregate row of a metric (query_id
null) is the mean over the queries where the metric is defined. Undefined
per-query values (e.g. a single presentation) are stored as null and left out
of that mean, with a logged count.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.contracts.tasks import TASKS
from presdep.contracts.views import (
    BATCH_NOISE,
    FIRST_STAGE,
    RANDOM_SHUFFLE,
    decision_presentations,
    first_stage_pass,
)
from presdep.metrics import instability, quality
from presdep.metrics.blocks import Block, build_blocks
from presdep.metrics.bsc import curve_rows
from presdep.metrics.design_rows import design_rows
from presdep.metrics.ledger_rows import ledger_metric_rows, run_ledger
from presdep.metrics.order_averaged import add_order_averaged_rows, first_stage_ranks
from presdep.metrics.position_rows import add_position_rows
from presdep.metrics.qa_rows import add_answer_rows, add_gold_slot_rows
from presdep.metrics.rerank_rows import add_retained_set_rows, add_threshold_rows, rerank_set_values
from presdep.metrics.response_rows import add_response_rows
from presdep.metrics.rows import MetricRows
from presdep.metrics.thresholds import read_thresholds, tune_thresholds
from presdep.metrics.zeng_rows import add_zeng_rows, strongest_relevant

log = logging.getLogger(__name__)

CANONICAL = "canonical"  # the v1 first-stage perturbation name, refused in scores (see _view)
BSC_CURVE = (1, 2, 3, 5, 10)
READER_K = 5  # the paper's headline top-k paragraphs for the QA reader
# The first-stage pass's measures per task (quality cells first).
QUALITY_MEASURES = {
    "rerank": ("ndcg@10", "ndcg@5", "map", "mrr"),
    "qa": ("ndcg@10", "recall@2", "recall@5"),
    "response": ("ndcg@1", "ndcg@10", "mrr"),
}
ZENG_PERTURBATIONS = ("random_shuffle", "middle_injection")

# Block, build_blocks, strongest_relevant and rerank_set_values are re-exported: callers
# import them from here.
__all__ = [
    "BSC_CURVE",
    "CANONICAL",
    "QUALITY_MEASURES",
    "READER_K",
    "TASKS",
    "ZENG_PERTURBATIONS",
    "Block",
    "build_blocks",
    "compute_metrics",
    "metrics_from_files",
    "rerank_set_values",
    "strongest_relevant",
    "write_metrics",
]


def _view(scores: pl.DataFrame, bsc_k: int, ensembles: int) -> pl.DataFrame:
    """The frame metrics are computed on: the quality pass (perturbation first_stage) and,
    per other perturbation, its decision presentations (BSC ensembles for bsc_k > 1)."""
    perts = sorted(set(scores["perturbation"].cast(pl.String).unique().to_list()) - {FIRST_STAGE, BATCH_NOISE})
    if CANONICAL in perts:
        raise InvalidInput(
            "scores hold a 'canonical' perturbation (the v1 first-stage rows); presdep now names the "
            "first-stage pass 'first_stage' and uses shuffle 0 as canonical: re-score this variant"
        )
    parts = [first_stage_pass(scores, bsc_k=bsc_k, ensembles=ensembles).with_columns(
        pl.lit(FIRST_STAGE).alias("perturbation"))]
    if bsc_k > 1 and set(perts) - {RANDOM_SHUFFLE}:
        # BSC's presentations are ensembles of random shuffles; other perturbations hold
        # single passes, which are not the BSC scorer's output.
        log.warning("BSC (K = %d): perturbation(s) %s are single passes, not BSC scores; not measured",
                    bsc_k, sorted(set(perts) - {RANDOM_SHUFFLE}))
        perts = [p for p in perts if p == RANDOM_SHUFFLE]
    for p in perts:
        dp = decision_presentations(scores, bsc_k=bsc_k, ensembles=ensembles, perturbation=p)
        parts.append(dp.with_columns(pl.lit(p).alias("perturbation")))
    return pl.concat(parts, how="diagonal_relaxed")


def compute_metrics(
    scores: pl.DataFrame,
    qrels: pl.DataFrame,
    *,
    dataset: str,
    task: str,
    variant: str,
    seed: int | None,
    answers: pl.DataFrame | None = None,
    gold: pl.DataFrame | None = None,
    thresholds: Mapping[str, Any] | None = None,
    bsc_k: int = 1,
    ensembles: int = 4,
    reader_k: int = READER_K,
    bsc_curve: Sequence[int] = BSC_CURVE,
    zeng: bool = True,
) -> pl.DataFrame:
    """The ``metrics`` table (schemas.SCHEMAS["metrics"]) of one variant on one dataset.

    Perturbation ``first_stage`` holds the quality cells (the first-stage pass; for BSC,
    ensemble 0's BSC scores): rerank ndcg@10, ndcg@5, map, mrr; qa ndcg@10, recall@2,
    recall@5; response ndcg@1, ndcg@10, mrr. Every other perturbation (its decision
    presentations, presdep.contracts.views) gets ndcg{k}_shuffle_mean/worst/best, tau_psi (the
    paper's: strict rankings, ties by presented position, tau-a), tau_psi_b (tau-b
    on raw scores) and tie_rate (share of tied document pairs, see tie_rate), and per task:

    * rerank, on the test half of ``thresholds`` at its frozen t_star: jaccard,
      set_flip, retained_size, precision, recall, f1, retention, canonical_precision,
      canonical_recall, canonical_f1, canonical_retention, score_variance,
      matched_jaccard, matched_set_flip; zeng_psi / zeng_psi_corpus; aggregate rows
      t_star and warn_* (degenerate decisions: rerank_rows.DEGENERATE_FLAGS). ``thresholds``
      None: tuned here by presdep.metrics.thresholds (the CLI path; the workflow passes its artifact).
    * qa: gold_in_top{reader_k}, gold_slot_mean, gold_slot_var; with ``answers``:
      answer_flip, and with ``gold``: em and f1 (canonical, presentation 0), em_mean,
      f1_mean (over presentations).
    * response: pair_flip, selection_flip, selected_quality_flip,
      selected_quality_mean, selected_quality_canonical.

    BSC (``bsc_k`` > 1): also the K-curve under perturbations ``bsc_curve_k{K}``.
    """
    _check_scores(scores, task)
    qrels_d = quality.qrels_to_dict(qrels)
    blocks = _metric_blocks(scores, bsc_k, ensembles)
    threshold = (_rerank_threshold(thresholds, scores, qrels, bsc_k=bsc_k, ensembles=ensembles)
                 if task == "rerank" else None)
    rows = MetricRows()
    for pert in sorted(blocks, key=lambda p: (p != FIRST_STAGE, p)):  # the quality cells first
        if pert == FIRST_STAGE:
            _quality_rows(rows, blocks[pert], qrels_d, task)
        else:
            _decision_rows(rows, pert, blocks[pert], qrels_d, task=task, threshold=threshold, reader_k=reader_k,
                           zeng=zeng and bsc_k == 1)
            if pert == RANDOM_SHUFFLE:
                add_order_averaged_rows(rows, pert, blocks[pert], first_stage_ranks(blocks.get(FIRST_STAGE, [])),
                                        qrels_d, task)
    _noise_rows(rows, scores)
    add_position_rows(rows, scores, qrels_d)
    if threshold is not None:
        add_threshold_rows(rows, threshold.artifact, blocks.get(RANDOM_SHUFFLE, []), qrels_d, threshold.test_queries)
    rows.add(RANDOM_SHUFFLE, None, "passes_per_query", _passes_per_query(scores))
    for row in design_rows(scores):
        rows.add(*row)
    _answer_rows(rows, answers, gold, task)
    if bsc_k > 1:
        _bsc_curve_rows(rows, scores, qrels, task=task, bsc_k=bsc_k, ensembles=ensembles, ks=bsc_curve,
                        thresholds=threshold.artifact if threshold is not None else thresholds)
    return _metrics_frame(dataset=dataset, task=task, variant=variant, seed=seed, perturbation=rows.pert,
                          query_id=rows.qid, metric=rows.metric, value=rows.value)


@dataclass(frozen=True)
class RerankThreshold:
    """The retained-set threshold in use: the artifact, its frozen t* and its test queries."""

    artifact: Mapping[str, Any]
    t_star: float
    test_queries: set[str]


def _check_scores(scores: pl.DataFrame, task: str) -> None:
    """Refuse an unknown task, and scores without presented positions (the tie-break of every ranking)."""
    if task not in TASKS:
        raise InvalidInput(f"unknown task {task!r}; expected one of {TASKS}")
    for c in ("position",):
        if c not in scores.columns:
            raise InvalidInput(f"scores lacks column {c!r}: ties are broken by presented position")


def _metric_blocks(scores: pl.DataFrame, bsc_k: int, ensembles: int) -> dict[str, list[Block]]:
    """The blocks of the frame metrics read, per perturbation; one first-stage presentation per query."""
    blocks = build_blocks(_view(scores, bsc_k, ensembles))
    if FIRST_STAGE not in blocks:
        raise InvalidInput("scores have no first-stage pass rows (perturbation 'first_stage')")
    for b in blocks[FIRST_STAGE]:
        if b.scores.shape[0] != 1:
            raise InvalidInput(f"scores: query {b.query_id!r} has {b.scores.shape[0]} first-stage presentations")
    return blocks


def _rerank_threshold(thresholds: Mapping[str, Any] | None, scores: pl.DataFrame, qrels: pl.DataFrame, *,
                      bsc_k: int, ensembles: int) -> RerankThreshold:
    """The threshold artifact given, or one tuned here on the development half (the CLI path)."""
    if thresholds is None:
        thresholds = tune_thresholds(scores, qrels, bsc_k=bsc_k, ensembles=ensembles)
    t_star = float(thresholds["t_star"])
    test_q = set(str(q) for q in thresholds["test_queries"])
    log.info("retained-set threshold t* = %.6g (%d test queries)", t_star, len(test_q))
    return RerankThreshold(thresholds, t_star, test_q)


def _evaluate(bl: Sequence[Block], qrels_d: Mapping, measures: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """Per measure, per judged query, the measure on each presentation of the blocks."""
    return quality.evaluate_presentations([b.query_id for b in bl], [b.doc_ids for b in bl], [b.scores for b in bl],
                                          [b.positions for b in bl], qrels_d, measures)


def _quality_rows(rows: MetricRows, bl: Sequence[Block], qrels_d: Mapping, task: str) -> None:
    """The quality cells: the task's QUALITY_MEASURES on the first-stage pass, per judged query and mean."""
    qids = [b.query_id for b in bl]
    for name, per_q in _evaluate(bl, qrels_d, QUALITY_MEASURES[task]).items():
        judged = [q for q in qids if q in per_q]
        rows.per_query(FIRST_STAGE, name, judged, [per_q[q][0] for q in judged])


def _decision_rows(rows: MetricRows, pert: str, bl: Sequence[Block], qrels_d: Mapping, *, task: str,
                   threshold: RerankThreshold | None, reader_k: int, zeng: bool) -> None:
    """One perturbation's rows: nDCG over its presentations, tau_psi and tau_psi_b, then the task's family."""
    qual_k = 1 if task == "response" else 10
    qids = [b.query_id for b in bl]
    nd = _evaluate(bl, qrels_d, [f"ndcg@{qual_k}"])[f"ndcg@{qual_k}"]
    judged = [q for q in qids if q in nd]
    for stat, fn in (("mean", np.mean), ("worst", np.min), ("best", np.max)):
        rows.per_query(pert, f"ndcg{qual_k}_shuffle_{stat}", judged, [fn(nd[q]) for q in judged])
    strict = [quality.presented_ranks(b.scores, b.positions) for b in bl]
    rows.per_query(pert, "tau_psi", qids, instability.tau_psi_many(strict))
    rows.per_query(pert, "tau_psi_b", qids, instability.tau_psi_many([b.scores for b in bl]))
    rows.per_query(pert, "tie_rate", qids, [tie_rate(b.scores) for b in bl])
    if task == "rerank":
        assert threshold is not None
        add_retained_set_rows(rows, pert, [b for b in bl if b.query_id in threshold.test_queries], qrels_d,
                              threshold.t_star)
        if zeng and pert in ZENG_PERTURBATIONS:
            add_zeng_rows(rows, pert, bl, nd, qrels_d)
    elif task == "qa":
        add_gold_slot_rows(rows, pert, bl, qrels_d, reader_k)
    else:
        add_response_rows(rows, pert, bl, qrels_d)


def tie_rate(scores: np.ndarray) -> float:
    """Share of tied document pairs of one query's (M, n) presentations: per presentation, the pairs
    with exactly equal scores out of n(n-1)/2, mean over presentations; NaN for n < 2 (no pair).
    These pairs are the ones tau-PSI (tau-a) orders by presented position (docs/methods/tau-psi.md)."""
    m, n = np.shape(scores)
    if n < 2 or m == 0:
        return math.nan
    tied = [sum(c * (c - 1) // 2 for c in np.unique(row, return_counts=True)[1]) for row in np.asarray(scores)]
    return float(np.mean(tied)) / (n * (n - 1) / 2)


def _noise_rows(rows: MetricRows, scores: pl.DataFrame) -> None:
    """tau_psi_noise beside tau_psi: the tau-PSI (strict, ties by presented position) of the R
    re-reads of the first-stage presentation in other batch compositions (perturbation
    batch_noise, protocol.noise_rereads); none when the scores hold no re-reads."""
    noise = scores.filter(pl.col("perturbation") == BATCH_NOISE)
    if noise.height == 0:
        return
    bl = build_blocks(noise).get(BATCH_NOISE, [])
    strict = [quality.presented_ranks(b.scores, b.positions) for b in bl]
    rows.per_query(RANDOM_SHUFFLE, "tau_psi_noise", [b.query_id for b in bl], instability.tau_psi_many(strict))


def _answer_rows(rows: MetricRows, answers: pl.DataFrame | None, gold: pl.DataFrame | None, task: str) -> None:
    """The reader's answer rows (task qa only); gold answers without answers give none."""
    if answers is not None:
        if task != "qa":
            raise InvalidInput(f"answers are only used for task 'qa', not {task!r}")
        add_answer_rows(rows, answers, gold)
    elif gold is not None:
        log.warning("gold answers given without answers: no answer metrics")


def _bsc_curve_rows(rows: MetricRows, scores: pl.DataFrame, qrels: pl.DataFrame, *, task: str, bsc_k: int,
                    ensembles: int, ks: Sequence[int], thresholds: Mapping[str, Any] | None) -> None:
    """BSC's K-curve: the decision metrics at each K of ``ks`` (perturbations ``bsc_curve_k{K}``)."""
    for pert, qid, metric, val in curve_rows(scores, qrels, task=task, bsc_k=bsc_k, ensembles=ensembles,
                                             ks=ks, thresholds=thresholds):
        rows.add(pert, qid, metric, val)


def _metrics_frame(*, dataset: str, task: str, variant: str, seed: int | None, perturbation: list[str],
                   query_id: list[str | None], metric: list[str], value: list[float | None]) -> pl.DataFrame:
    """The long metrics table of these row columns, the variant's identity repeated on every row."""
    n_rows = len(metric)
    return pl.DataFrame(
        {
            "dataset": [dataset] * n_rows,
            "task": [task] * n_rows,
            "variant": [variant] * n_rows,
            "seed": pl.Series([seed] * n_rows, dtype=pl.Int32),
            "perturbation": perturbation,
            "query_id": pl.Series(query_id, dtype=pl.String),
            "metric": metric,
            "value": pl.Series(value, dtype=pl.Float64),
        }
    )


def _passes_per_query(scores: pl.DataFrame) -> float:
    """Scoring passes (presentations of any perturbation) per shuffled query: the cost BSC pays.
    Queries off the dataset's shuffle list have the first-stage pass only and are not counted."""
    scores = scores.filter(pl.col("perturbation") != BATCH_NOISE)  # a diagnostic's reads, not the scorer's cost
    shuffled = scores.filter(pl.col("perturbation") == RANDOM_SHUFFLE)["query_id"].unique()
    if shuffled.len():
        scores = scores.filter(pl.col("query_id").is_in(shuffled.implode()))
    per_q = scores.group_by("query_id").agg(
        pl.struct("perturbation", "presentation").n_unique().alias("n")
    )
    return float(per_q["n"].mean()) if per_q.height else math.nan


def write_metrics(df: pl.DataFrame, path: str | os.PathLike, params: Mapping[str, Any] | None = None):
    """Validate against the ``metrics`` contract and write atomically."""
    return write_table(df, path, "metrics", params)


def _reader_k(answers_path: str | os.PathLike | None) -> int:
    """The k an answers file records (metadata ``k`` or ``params.k``); the paper's 5 if none."""
    meta = read_metadata(answers_path) if answers_path else {}
    k = meta.get("k", (meta.get("params") or {}).get("k"))
    if k is None:
        log.warning("%s records no reader k; gold_in_top%d uses the paper's k = %d", answers_path, READER_K, READER_K)
        return READER_K
    return int(k)


def metrics_from_files(
    scores_path: str | os.PathLike,
    qrels_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    dataset: str,
    task: str,
    variant: str,
    seed: int | None,
    answers_path: str | os.PathLike | None = None,
    gold_path: str | os.PathLike | None = None,
    thresholds_path: str | os.PathLike | None = None,
    bsc_k: int = 1,
    ensembles: int = 4,
    reader_k: int | None = None,
    ledger_path: str | os.PathLike | None = None,
) -> pl.DataFrame:
    """Read the artifacts, compute the metrics, write them (the workflow's entry point); with
    ``ledger_path`` also the run's flip ledger (presdep.metrics.ledger_rows).

    Reranking needs ``thresholds_path`` (the threshold artifact, the one source of t*).
    QA: ``reader_k`` (the reader's top-k paragraphs) defaults to the k the answers
    file records in its metadata.
    """
    if task == "qa" and reader_k is None:
        reader_k = _reader_k(answers_path)

    if task == "rerank" and thresholds_path is None:
        raise InvalidInput(f"{scores_path}: reranking metrics need the threshold artifact (thresholds_path)")
    scores = read_table(scores_path, "scores")
    answers = read_table(answers_path, "answers") if answers_path else None
    thresholds = read_thresholds(thresholds_path) if thresholds_path else None
    reader_k = reader_k if reader_k is not None else READER_K
    metrics = compute_metrics(
        scores,
        read_table(qrels_path, "qrels"),
        dataset=dataset,
        task=task,
        variant=variant,
        seed=seed,
        answers=answers,
        gold=read_table(gold_path, "answers_gold") if gold_path else None,
        thresholds=thresholds,
        bsc_k=bsc_k,
        ensembles=ensembles,
        reader_k=reader_k,
    )
    stats = read_metadata(scores_path).get("scorer_stats") or {}
    if "parse_failures" in stats:  # generative listwise: windows whose reply needed the repair rule
        extra = [("parse_failures", float(stats["parse_failures"])),
                 ("parse_failure_share", stats["parse_failures"] / stats["windows"] if stats.get("windows") else None)]
        metrics = pl.concat([metrics, _metrics_frame(
            dataset=dataset, task=task, variant=variant, seed=seed, perturbation=[FIRST_STAGE] * 2,
            query_id=[None, None], metric=[m for m, _ in extra], value=[v for _, v in extra])])
    params = {
        "dataset": dataset, "task": task, "variant": variant, "seed": seed,
        "scores": str(scores_path), "qrels": str(qrels_path),
        "answers": None if answers_path is None else str(answers_path),
        "gold": None if gold_path is None else str(gold_path),
        "thresholds": None if thresholds_path is None else str(thresholds_path),
        "bsc_k": bsc_k, "bsc_ensembles": ensembles, "reader_k": reader_k,
    }
    if ledger_path is not None:
        # Why each decision flipped (docs/methods/flip-ledger.md): the ledger beside the metrics, its
        # counts among them (perturbation flip_ledger) for Table 1's counts file and notes.
        ledger = run_ledger(scores, task, thresholds=thresholds, answers=answers, bsc_k=bsc_k, ensembles=ensembles,
                            reader_k=reader_k)
        write_table(ledger, ledger_path, "flip_ledger", params, dataset=dataset, variant=variant, seed=seed)
        rows = list(ledger_metric_rows(ledger, task))
        metrics = pl.concat([metrics, _metrics_frame(
            dataset=dataset, task=task, variant=variant, seed=seed, perturbation=[r[0] for r in rows],
            query_id=[r[1] for r in rows], metric=[r[2] for r in rows], value=[r[3] for r in rows])])
    write_metrics(metrics, out_path, params)
    return metrics
