"""The slot-effect rows of the metrics table, through the real scoring and metrics path, and the
per-run read-back the counts file and the position figure use (presdep.metrics.position_rows)."""

from __future__ import annotations

import polars as pl
import pytest
from scorers_tiny import VARIANT, score_then_metrics

from presdep.contracts.readouts import GradeReadout
from presdep.metrics import slot_test
from presdep.metrics.position_rows import SLOT_TEST_METRICS, slot_test_cells
from presdep.scoring.backends import IdentityScorer

PROTO = {"seed": 13, "M": 4, "B": 3, "perturbations": ["random_shuffle"], "max_doc_chars": 200}


class SlotBonusScorer:
    """score = 3 - slot, plus a small term of the document's text length: the slot decides."""

    name = "slot_bonus"
    template_sha256 = "x"

    def score_prompts(self, prompts):
        return [[GradeReadout(3.0 - s + 0.01 * len(d)) for s, d in enumerate(docs)] for _, docs in prompts]


def _aggregate(metrics: pl.DataFrame) -> dict[str, float | None]:
    agg = metrics.filter(pl.col("query_id").is_null() & (pl.col("perturbation") == "random_shuffle"))
    return dict(zip(agg["metric"], agg["value"]))


def test_the_identity_scorer_has_no_slot_effect_and_the_chance_level_of_its_design(tmp_path):
    _, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "identity"}, PROTO, "rerank",
                                    scorer=IdentityScorer())
    agg = _aggregate(metrics)
    assert agg["var_share_slot"] == 0.0 and agg["slot_p_value"] == 1.0 and agg["slot_share_null_mean"] == 0.0
    # 6 documents in 2 prompts of 3, 4 shuffles: r = 2 slot contrasts of N = 24 rows.
    assert agg["slot_share_chance"] == pytest.approx(2 / 23)
    per_q = metrics.filter((pl.col("metric") == "slot_share_chance") & pl.col("query_id").is_not_null())
    assert per_q.height == 4 and per_q["value"].to_list() == pytest.approx([2 / 23] * 4)
    for s in range(3):  # the identity scorer's centred scores are 0: a zero-width interval at 0
        assert agg[f"slot_centred_ci95_clustered_low_s{s:02d}"] == 0.0
        assert agg[f"slot_centred_ci95_clustered_high_s{s:02d}"] == 0.0


def test_a_slot_scorer_is_detected_and_its_interval_excludes_zero(tmp_path):
    scores, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "slot_bonus"}, PROTO, "rerank",
                                         scorer=SlotBonusScorer())
    agg = _aggregate(metrics)
    assert agg["slot_p_value"] < 0.01 and agg["var_share_slot"] > agg["slot_share_chance"]
    assert agg["slot_centred_ci95_clustered_low_s00"] > 0 > agg["slot_centred_ci95_clustered_high_s02"]
    # The row equals the test run on the same blocks by hand.
    from presdep.metrics.position import query_blocks

    shuffles = scores.filter(pl.col("perturbation") == "random_shuffle")
    blocks = query_blocks(shuffles.select("query_id", "doc_id", "presentation", "slot", "score")
                          .to_dict(as_series=False), {})
    want = slot_test.slot_permutation_test([(sc, sl) for _, sc, sl, _ in blocks])
    assert agg["slot_p_value"] == want.p_value and agg["slot_share_chance"] == pytest.approx(want.chance)
    assert agg["var_share_slot"] == pytest.approx(want.observed, abs=1e-9)


def _metrics(variant: str, dataset: str, seed: int | None, values: dict[str, float | None]) -> pl.DataFrame:
    rows = [("random_shuffle", None, k, v) for k, v in values.items()]
    rows += [("random_shuffle", "q1", "slot_p_value", 0.5), ("first_stage", None, "slot_p_value", 0.7)]
    return pl.DataFrame({"dataset": dataset, "task": "rerank", "variant": variant, "seed": seed,
                         "perturbation": [r[0] for r in rows], "query_id": [r[1] for r in rows],
                         "metric": [r[2] for r in rows], "value": [r[3] for r in rows]},
                        schema_overrides={"seed": pl.Int64, "value": pl.Float64, "query_id": pl.String})


def test_slot_test_cells_reads_one_row_per_run():
    table = pl.concat([
        _metrics("b", "dl19", None, {"var_share_slot": 0.4, "slot_share_chance": 0.1, "slot_share_null_mean": 0.05,
                                      "slot_p_value": 0.001, "tau_psi": 0.3}),
        _metrics("a", "dl19", 2, {"var_share_slot": 0.01, "slot_p_value": 0.6}),
        _metrics("a", "dl19", 1, {"tau_psi": 0.2}),  # no slot rows: absent
    ])
    out = slot_test_cells(table)
    assert out.columns == ["variant", "task", "dataset", "seed", *SLOT_TEST_METRICS]
    assert out.rows() == [("a", "rerank", "dl19", 2, 0.01, None, None, 0.6),
                          ("b", "rerank", "dl19", None, 0.4, 0.1, 0.05, 0.001)]
    assert slot_test_cells(table.filter(pl.col("metric") == "tau_psi")).height == 0
