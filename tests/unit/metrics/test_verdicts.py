"""Verdict flip and its companions against hand computations."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from presdep.contracts.errors import InvalidInput
from presdep.metrics.verdicts import accuracy_spread, claim_values, modal_flip, verdict_metrics


def _verdicts(rows):
    return pl.DataFrame(rows, schema={"query_id": pl.String, "perturbation": pl.String, "presentation": pl.Int32,
                                      "verdict": pl.String, "raw_answer": pl.String, "gold": pl.String,
                                      "evidence_in_topk": pl.Int32, "evidence_slot": pl.Int32}, orient="row")


ROWS = [  # claim c1 over 4 shuffles; claim c2 over 4 shuffles, never any evidence
    ("c1", "random_shuffle", 0, "SUPPORTED", "", "SUPPORTED", 1, 0),
    ("c1", "random_shuffle", 1, "SUPPORTED", "", "SUPPORTED", 2, 2),
    ("c1", "random_shuffle", 2, "REFUTED", "", "SUPPORTED", 0, None),
    ("c1", "random_shuffle", 3, "INVALID", "", "SUPPORTED", 1, 2),
    ("c2", "random_shuffle", 0, "NEI", "", "REFUTED", 0, None),
    ("c2", "random_shuffle", 1, "NEI", "", "REFUTED", 0, None),
    ("c2", "random_shuffle", 2, "NEI", "", "REFUTED", 0, None),
    ("c2", "random_shuffle", 3, "REFUTED", "", "REFUTED", 0, None),
]


def test_modal_flip():
    assert modal_flip(["a"]) == 0.0
    assert modal_flip(["a", "b", "a", "INVALID"]) == 0.5  # INVALID is a class of its own
    assert modal_flip(["a", "b", "c"]) == pytest.approx(2 / 3)
    with pytest.raises(InvalidInput):
        modal_flip([])


def test_claim_values_by_hand():
    v = claim_values(_verdicts(ROWS[:4]))
    assert v["verdict_flip"] == 0.5  # (4 - 2) / 4
    assert v["verdict_canonical_accuracy"] == 1.0 and v["verdict_mean_accuracy"] == 0.5
    assert v["verdict_invalid_rate"] == 0.25 and v["verdict_evidence_in_topk"] == 0.75
    # Slots 0, 2, 2 (shuffle 2 read no evidence): mean 4/3, population variance (16 + 4 + 4) / 27.
    assert v["verdict_evidence_slot_mean"] == pytest.approx(4 / 3)
    assert v["verdict_evidence_slot_var"] == pytest.approx(24 / 27)
    w = claim_values(_verdicts(ROWS[4:]))
    assert w["verdict_flip"] == 0.25 and w["verdict_canonical_accuracy"] == 0.0 and w["verdict_mean_accuracy"] == 0.25
    assert w["verdict_evidence_slot_mean"] is None and w["verdict_evidence_slot_var"] is None


def test_verdict_metrics_aggregate_rows():
    m = verdict_metrics(_verdicts(ROWS), dataset="climate-fever", variant="off_the_shelf", seed=None,
                        facts={"excluded_disputed": 3})
    agg = {r["metric"]: r["value"] for r in m.filter(pl.col("query_id").is_null()).iter_rows(named=True)}
    assert agg["verdict_flip"] == pytest.approx((0.5 + 0.25) / 2)
    assert agg["verdict_mean_accuracy"] == pytest.approx((0.5 + 0.25) / 2)
    assert agg["verdict_canonical_accuracy"] == 0.5
    assert agg["verdict_evidence_slot_mean"] == pytest.approx(4 / 3)  # c2 has none: skipped, not 0
    assert agg["verdict_claims"] == 2 and agg["verdict_excluded_disputed"] == 3
    assert set(m["task"]) == {"verdict"}
    per = m.filter((pl.col("query_id") == "c2") & (pl.col("metric") == "verdict_flip"))
    assert per["value"].to_list() == [0.25]


def _aggregate(metrics: pl.DataFrame) -> dict[str, float | None]:
    return {r["metric"]: r["value"] for r in metrics.filter(pl.col("query_id").is_null()).iter_rows(named=True)}


def test_accuracy_spread_by_hand():
    # A third claim right in every shuffle joins ROWS' two (c1 has an INVALID reply, which is wrong).
    rows = ROWS + [("c3", "random_shuffle", p, "NEI", "", "NEI", 0, None) for p in range(4)]
    correct = np.array([[1, 1, 0, 0],   # c1: SUPPORTED, SUPPORTED, REFUTED, INVALID against SUPPORTED
                        [0, 0, 0, 1],   # c2: NEI, NEI, NEI, REFUTED against REFUTED
                        [1, 1, 1, 1]])  # c3: NEI throughout against NEI
    per_claim = correct.mean(axis=1)
    agg = _aggregate(verdict_metrics(_verdicts(rows), dataset="climate-fever", variant="oc_sft", seed=42))
    assert agg["verdict_accuracy_spread"] == pytest.approx(float(np.std(per_claim, ddof=1)))
    assert agg["verdict_order_dependent_share"] == pytest.approx(2 / 3)  # c1 and c2; c3 is always right


def test_accuracy_spread_edges():
    one = _aggregate(verdict_metrics(_verdicts(ROWS[:4]), dataset="climate-fever", variant="oc_sft", seed=42))
    assert one["verdict_accuracy_spread"] is None and one["verdict_order_dependent_share"] == 1.0  # one claim: no SD
    always_wrong = [("c4", "random_shuffle", p, "INVALID", "", "REFUTED", 0, None) for p in range(3)]
    both = _aggregate(verdict_metrics(_verdicts(ROWS[4:] + always_wrong), dataset="climate-fever",
                                      variant="oc_sft", seed=42))
    assert both["verdict_accuracy_spread"] == pytest.approx(float(np.std([0.25, 0.0], ddof=1)))
    assert both["verdict_order_dependent_share"] == 0.5  # accuracy 0 is not order-dependent
    with pytest.raises(InvalidInput, match="at least one claim"):
        accuracy_spread([])
