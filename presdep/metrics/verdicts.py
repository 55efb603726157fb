"""Verdict flip and its companions, per claim, from the verdict reader's judgements.

Per (perturbation, claim) over its M presentations (docs/methods/verdict-flip.md):

- ``verdict_flip`` = (M - count of the most common verdict) / M, INVALID a class of its own
  (0 when M = 1);
- ``verdict_canonical_accuracy``: presentation 0's verdict equals the gold one (INVALID is wrong);
- ``verdict_mean_accuracy``: the same, averaged over presentations;
- ``verdict_invalid_rate``: share of presentations whose reply named no class or several;
- ``verdict_evidence_in_topk``: share of presentations whose top k held a judged relevant passage;
- ``verdict_evidence_slot_mean`` / ``_var``: the 0-based slot of the first such passage, mean and
  population variance over the presentations that held one (null when none did).

Aggregate rows (``query_id`` null) are the means over claims, nulls skipped, plus the counts
``verdict_claims`` and ``verdict_excluded_disputed`` (claims left out because their gold verdict is
DISPUTED, from the verdicts file's facts), and the per-claim accuracy spread over the claims
(:func:`accuracy_spread`): ``verdict_accuracy_spread``, the sample SD (ddof 1) of the claims'
``verdict_mean_accuracy`` (null with one claim), and ``verdict_order_dependent_share``, the share of
claims whose accuracy lies strictly between 0 and 1 (right in some shuffles, wrong in others).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_table

PER_CLAIM = ("verdict_flip", "verdict_canonical_accuracy", "verdict_mean_accuracy", "verdict_invalid_rate",
             "verdict_evidence_in_topk", "verdict_evidence_slot_mean", "verdict_evidence_slot_var")
SPREAD = ("verdict_accuracy_spread", "verdict_order_dependent_share")
TASK = "verdict"


def modal_flip(values: Sequence[str]) -> float:
    """(M - count of the most common value) / M."""
    if not values:
        raise InvalidInput("a flip rate needs at least one presentation")
    return (len(values) - Counter(values).most_common(1)[0][1]) / len(values)


def claim_values(rows: pl.DataFrame) -> dict[str, float | None]:
    """The per-claim metrics of one claim's presentations (columns of the verdicts contract)."""
    rows = rows.sort("presentation")
    verdicts, gold = rows["verdict"].to_list(), rows["gold"].to_list()
    correct = [float(v == g) for v, g in zip(verdicts, gold)]
    canonical = rows.filter(pl.col("presentation") == 0)
    slots = [s for s in rows["evidence_slot"].to_list() if s is not None]
    return {
        "verdict_flip": modal_flip(verdicts),
        "verdict_canonical_accuracy": (float(canonical["verdict"][0] == canonical["gold"][0])
                                       if canonical.height else None),
        "verdict_mean_accuracy": float(np.mean(correct)),
        "verdict_invalid_rate": float(np.mean([v == "INVALID" for v in verdicts])),
        "verdict_evidence_in_topk": float(np.mean([n > 0 for n in rows["evidence_in_topk"].to_list()])),
        "verdict_evidence_slot_mean": float(np.mean(slots)) if slots else None,
        "verdict_evidence_slot_var": float(np.var(slots)) if slots else None,
    }


def accuracy_spread(accuracies: Sequence[float]) -> dict[str, float | None]:
    """Over a row's claims, from each claim's accuracy over its shuffles: their sample SD (ddof 1;
    null with fewer than two claims) and the share of claims whose correctness depends on the order
    (accuracy strictly between 0 and 1)."""
    if not accuracies:
        raise InvalidInput("an accuracy spread needs at least one claim")
    return {
        "verdict_accuracy_spread": float(np.std(accuracies, ddof=1)) if len(accuracies) > 1 else None,
        "verdict_order_dependent_share": float(np.mean([0.0 < a < 1.0 for a in accuracies])),
    }


def verdict_metrics(verdicts: pl.DataFrame, *, dataset: str, variant: str, seed: int | None,
                    facts: Mapping[str, Any] | None = None) -> pl.DataFrame:
    """Rows of the ``metrics`` contract: per claim and per perturbation, then their means."""
    out: list[dict] = []

    def row(pert: str, qid: str | None, metric: str, value: float | None) -> None:
        out.append({"dataset": dataset, "task": TASK, "variant": variant, "seed": seed, "perturbation": pert,
                    "query_id": qid, "metric": metric, "value": value})

    for (pert,), by_pert in sorted(verdicts.group_by("perturbation"), key=lambda kv: kv[0]):
        per_claim = []
        for (qid,), rows in sorted(by_pert.group_by("query_id"), key=lambda kv: kv[0]):
            values = claim_values(rows)
            per_claim.append(values)
            for metric, value in values.items():
                row(pert, qid, metric, value)
        for metric in PER_CLAIM:
            present = [v[metric] for v in per_claim if v[metric] is not None]
            row(pert, None, metric, float(np.mean(present)) if present else None)
        for metric, value in accuracy_spread([v["verdict_mean_accuracy"] for v in per_claim]).items():
            row(pert, None, metric, value)
        row(pert, None, "verdict_claims", float(len(per_claim)))
        row(pert, None, "verdict_excluded_disputed", float((facts or {}).get("excluded_disputed", 0)))
    return pl.DataFrame(out, schema={"dataset": pl.String, "task": pl.String, "variant": pl.String,
                                     "seed": pl.Int32, "perturbation": pl.String, "query_id": pl.String,
                                     "metric": pl.String, "value": pl.Float64})


def verdict_metrics_files(verdicts_path: str, out_path: str, *, dataset: str, variant: str,
                          seed: int | None) -> pl.DataFrame:
    """The ``verdict_metrics`` job: one verdicts file -> its metrics file."""
    meta = read_metadata(verdicts_path)
    metrics = verdict_metrics(read_table(verdicts_path, "verdicts"), dataset=dataset, variant=variant, seed=seed,
                              facts=meta.get("facts"))
    write_table(metrics, out_path, "metrics", {"verdicts": str(verdicts_path)}, k=meta.get("k"),
                reader=meta.get("reader"), facts=meta.get("facts"))
    return metrics


__all__ = ["PER_CLAIM", "SPREAD", "TASK", "accuracy_spread", "claim_values", "modal_flip", "verdict_metrics",
           "verdict_metrics_files"]
