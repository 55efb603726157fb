"""The flip ledger of one (variant, dataset) beside its metrics: the ledger table the metrics job
writes, and its counts as aggregate metrics rows (perturbation ``flip_ledger``) so Table 1's
counts file and notes pool them over datasets and seeds like any other cell
(docs/methods/flip-ledger.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import polars as pl

from presdep.metrics.flip_ledger import CAUSES, DECISIONS, LEDGER_SCHEMA, TESTED_CAUSES, flip_ledger, ledger_shares

LEDGER_PERTURBATION = "flip_ledger"


def run_ledger(scores: pl.DataFrame, task: str, *, thresholds: Mapping[str, Any] | None,
               answers: pl.DataFrame | None, bsc_k: int, ensembles: int, reader_k: int) -> pl.DataFrame:
    """The ledger at the run's frozen decision rules: reranking at t* on the test half of the split."""
    t_star = queries = None
    if task == "rerank":
        if thresholds is None or thresholds.get("t_star") is None:
            return pl.DataFrame(schema=LEDGER_SCHEMA)  # no threshold: no retained-set decision to flip
        t_star, queries = float(thresholds["t_star"]), list(thresholds["test_queries"])
    return flip_ledger(scores, t_star, task, answers=answers, queries=queries, bsc_k=bsc_k, ensembles=ensembles,
                       reader_k=reader_k)


def ledger_metric_rows(ledger: pl.DataFrame, task: str) -> Iterator[tuple[str, None, str, float]]:
    """(perturbation, query_id, metric, value): per decision of the task, its flips, each cause's count
    and, per tested cause, the number of flips it could be tested on (0: no batch_noise rows, no
    within-chunk rows, no repair flags)."""
    for decision in DECISIONS[task]:
        shares = ledger_shares(ledger, decision)
        yield LEDGER_PERTURBATION, None, f"{decision}_flips", shares["flips"]
        for cause in CAUSES:
            yield LEDGER_PERTURBATION, None, f"{decision}_{cause}", shares[f"{cause}_count"]
        for cause in TESTED_CAUSES:  # how many of the flips the cause could be tested on
            tested = shares[f"{cause}_evaluable"] * shares["flips"] if shares["flips"] else 0.0
            yield LEDGER_PERTURBATION, None, f"{decision}_{cause}_tested", round(tested)


__all__ = ["LEDGER_PERTURBATION", "ledger_metric_rows", "run_ledger"]
