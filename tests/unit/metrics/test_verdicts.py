"""Verdict flip and its companions against hand computations."""

from __future__ import annotations

import polars as pl
import pytest

from presdep.contracts.errors import InvalidInput
from presdep.metrics.verdicts import claim_values, modal_flip, verdict_metrics


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
