"""Table 1's "what this means" note comes from the diagnostics: each statement at its stated
threshold, quoting the number; the counts file carries chance, distance and diagnostics, and the
score-grade test's p-value that "against the qrels" rests on."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.metrics import position
from presdep.report import diagnosis
from presdep.report.tables import build_table1, to_markdown

VARIANT = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4,
           "scorer": "transformers", "model": "m", "tasks": ["rerank"]}


def _metrics(tau, share, rho_slot, rho_grade):
    rows = [("d", "rerank", "v", None, "random_shuffle", None, m, val)
            for m, val in (("tau_psi", tau), ("var_share_slot", share), ("spearman_slot_score", rho_slot),
                           ("spearman_score_grade", rho_grade))]
    rows += [("d", "rerank", "v", None, "random_shuffle", f"q{i}", "tau_psi", tau) for i in range(3)]
    return pl.DataFrame(rows, schema={"dataset": pl.String, "task": pl.String, "variant": pl.String,
                                      "seed": pl.Int32, "perturbation": pl.String, "query_id": pl.String,
                                      "metric": pl.String, "value": pl.Float64}, orient="row")


def test_a_slot_driven_scorer_at_chance_is_flagged_and_the_counts_carry_the_numbers():
    table, counts = build_table1(_metrics(0.512, 0.91, -0.977, -0.02), {"v": Variant.checked(VARIANT, name="v")})
    note = table["note"][0]
    assert note.startswith("order-dependent: rankings at chance (tau-PSI 0.51), scores follow the slot")
    assert note.endswith("Flags: chance (rerank); slot effect (rerank); no grade signal (rerank)")
    assert table["flags"][0] == "chance slot no_grade_signal"
    row = counts.filter(pl.col("column") == "rerank_tau_psi").row(0, named=True)
    assert row["chance"] == 0.5 and row["vs_chance"] == pytest.approx(0.012)
    assert (row["var_share_slot"], row["spearman_slot_score"], row["spearman_score_grade"]) == (0.91, -0.977, -0.02)


@pytest.mark.parametrize("tau, share, rho_grade, said", [
    (0.449, 0.1, 0.5, set()),                    # 0.051 from chance: not at chance
    (0.45, 0.1, 0.5, {"chance"}),                # exactly the band's edge
    (0.2, 0.5, 0.5, {"slot"}),                   # the slot share at its threshold
    (0.2, 0.49, 0.1, set()),                     # below it; |rho| = 0.1 is not below 0.1
    (0.2, 0.1, -0.099, {"no grade signal"}),
])
def test_each_finding_at_its_threshold(tau, share, rho_grade, said):
    assert diagnosis.findings(tau, {"var_share_slot": share, "spearman_slot_score": -0.5,
                                    "spearman_score_grade": rho_grade}) == said


@pytest.mark.parametrize("rho_grade, p, said", [
    (-0.25, 0.001, {"against the qrels"}),       # NovelEval's Spearman, the test rejects rho >= 0
    (-0.1, 0.0099, {"against the qrels"}),       # both at their thresholds
    (-0.25, 0.01, set()),                        # p not below alpha: not shown to run against them
    (-0.25, None, set()),                        # metrics without the test: no claim
    (-0.099, 0.0001, {"no grade signal"}),       # |rho| < 0.1 stays "no grade signal"
    (0.25, 0.0001, set()),                       # a positive rho never runs against the qrels
])
def test_against_the_qrels_needs_a_negative_rho_and_the_test(rho_grade, p, said):
    diag = {"var_share_slot": 0.1, "spearman_score_grade": rho_grade, diagnosis.GRADE_P_VALUE: p}
    assert diagnosis.findings(0.2, diag) == said


def _grade_metrics(rho_grade: float, p_by_dataset: dict[str, float]) -> pl.DataFrame:
    """A tau-PSI cell whose Spearman with grade is ``rho_grade`` in every dataset, with each dataset's
    score-grade test p-value (an aggregate row, as presdep.metrics.position_rows writes it)."""
    frames = []
    for dataset, p in p_by_dataset.items():
        part = _metrics(0.3, 0.1, -0.1, rho_grade).with_columns(pl.lit(dataset).alias("dataset"))
        test = pl.DataFrame([(dataset, "rerank", "v", None, "random_shuffle", None, diagnosis.GRADE_P_VALUE, p)],
                            schema=part.schema, orient="row")
        frames += [part, test]
    return pl.concat(frames)


def test_scores_against_the_qrels_are_flagged_with_a_legend_and_the_p_value_in_the_counts():
    variants = {"v": Variant.checked(VARIANT, name="v")}
    table, counts = build_table1(_grade_metrics(-0.25, {"a": 0.002, "b": 0.3}), variants)
    assert table["note"][0].endswith("Flags: against the qrels (rerank)")
    assert table["flags"][0] == "against_the_qrels"
    row = counts.filter(pl.col("column") == "rerank_tau_psi").row(0, named=True)
    # Bonferroni over the cell's runs, as the slot test: the smallest p times the number of runs
    assert row["spearman_score_grade"] == -0.25 and row[diagnosis.GRADE_P_VALUE] == pytest.approx(0.004)
    assert counts.columns.index(diagnosis.GRADE_P_VALUE) == counts.columns.index("spearman_score_grade") + 1
    md = to_markdown(table)
    assert md.count("- **against the qrels**: ") == 1 and "p < 0.01" in md


def test_a_negative_rho_on_too_few_documents_is_not_flagged():
    """One query of 4 documents in reverse grade order: rho = -1, yet p = 1/24 (only the observed
    order is as low), so the note does not say the scores run against the qrels."""
    grades = np.array([3.0, 2.0, 1.0, 0.0])
    scores = np.tile(np.array([0.1, 0.2, 0.3, 0.4]), (3, 1))
    rho, p = position.score_grade_spearman(scores, grades), position.score_grade_p_value([(scores, grades)])
    assert rho <= -diagnosis.NO_GRADE_SIGNAL and p == pytest.approx(1 / 24)
    table, counts = build_table1(_grade_metrics(rho, {"a": p}), {"v": Variant.checked(VARIANT, name="v")})
    assert "against the qrels" not in table["note"][0] and table["flags"][0] == ""
    assert counts.filter(pl.col("column") == "rerank_tau_psi")[diagnosis.GRADE_P_VALUE][0] == pytest.approx(1 / 24)
