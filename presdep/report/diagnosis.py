"""What a tau-PSI cell means, in words, from the run's own diagnostics (docs/methods/position.md).

Table 1's note for a row flags when its tau-PSI is at the chance level of unrelated rankings,
when the slot moves its scores, when the shuffle-averaged score does not follow the qrels, and
when it runs against them (presdep.report.table1_notes words them). Each flag is raised only when the number behind it
crosses a stated threshold; the counts file carries the numbers for every tau-PSI cell whether
or not a flag was raised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl

from presdep.contracts.columns import TABLE1_COLUMNS, Table1Column
from presdep.metrics.position_rows import GRADE_P_VALUE

# tau-PSI of two unrelated random rankings: E[tau] = 0, so (1 - 0) / 2.
CHANCE_TAU_PSI = 0.5
# |tau-PSI - 0.5| within this: "at chance". 0.05 is one tenth of the way from chance to
# perfect stability, less than the gap between any two rows the paper reports apart.
AT_CHANCE = 0.05
# The slot explains at least this share of the score variance across shuffles: "slot-driven".
SLOT_DRIVEN = 0.5
# The permutation test of "no slot effect" (presdep.metrics.slot_test) names the slot below this
# p-value, Bonferroni-corrected over the cell's runs (datasets x seeds). Without a p-value (metrics
# written before the test existed) the SLOT_DRIVEN share alone decides, as it used to.
SLOT_ALPHA = 0.01
# |Spearman(shuffle-averaged score, grade)| below this: the score does not follow the qrels.
NO_GRADE_SIGNAL = 0.1
# Spearman at or below -NO_GRADE_SIGNAL AND the one-sided permutation test within queries
# (presdep.metrics.position.score_grade_p_value) rejecting "rho >= 0" below this p-value,
# Bonferroni-corrected over the cell's runs: the score runs against the qrels, so averaging
# shuffles (which strengthens what the score follows) lowers nDCG. No p-value: no flag.
AGAINST_QRELS_ALPHA = 0.01
# The diagnostics each tau-PSI cell gets in the counts file (presdep.metrics.position).
DIAGNOSTICS = ("var_share_slot", "spearman_slot_score", "spearman_score_grade")
TAU_PSI_COLUMNS = [c for c, spec in TABLE1_COLUMNS.items() if spec.metric == "tau_psi"]


def diagnostic_columns(metric: str) -> dict[str, Table1Column]:
    """Per headline tau-PSI column, the cell of ``metric`` on the same task and perturbation."""
    return {c: Table1Column(TABLE1_COLUMNS[c].task, metric, TABLE1_COLUMNS[c].perturbation, "higher")
            for c in TAU_PSI_COLUMNS}


def _defined(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


def findings(tau_psi: float | None, diag: Mapping[str, float | None]) -> set[str]:
    """The statements a tau-PSI cell's numbers support, each at its stated threshold:
    "chance" (within AT_CHANCE of CHANCE_TAU_PSI), "slot" (the permutation test's p below
    SLOT_ALPHA; without a p-value, a slot share of at least SLOT_DRIVEN), "no grade signal"
    (|Spearman of the shuffle-averaged score with the grade| below NO_GRADE_SIGNAL) and "against
    the qrels" (that Spearman at most -NO_GRADE_SIGNAL and its test's p below AGAINST_QRELS_ALPHA)."""
    said = set()
    if _defined(tau_psi) and abs(tau_psi - CHANCE_TAU_PSI) <= AT_CHANCE:
        said.add("chance")
    share, p_value, rho_grade = diag.get("var_share_slot"), diag.get("slot_p_value"), diag.get("spearman_score_grade")
    if (p_value < SLOT_ALPHA) if _defined(p_value) else (_defined(share) and share >= SLOT_DRIVEN):
        said.add("slot")
    if _defined(rho_grade) and abs(rho_grade) < NO_GRADE_SIGNAL:
        said.add("no grade signal")
    grade_p = diag.get(GRADE_P_VALUE)
    if _defined(rho_grade) and rho_grade <= -NO_GRADE_SIGNAL and _defined(grade_p) and grade_p < AGAINST_QRELS_ALPHA:
        said.add("against the qrels")
    return said


def _runs(tests: pl.DataFrame, variant: str, task: str, column: str) -> pl.Series:
    """The defined values of ``column`` over a cell's runs (empty when the tests lack it)."""
    runs = tests.filter((pl.col("variant") == variant) & (pl.col("task") == task)) if column in tests.columns \
        else tests.clear()
    return runs[column].drop_nulls().drop_nans() if runs.height else pl.Series([], dtype=pl.Float64)


def _bonferroni(p: pl.Series) -> float | None:
    """The smallest p-value times the number of runs, capped at 1 (None without runs): the effect is
    there in at least one dataset or seed."""
    return min(1.0, float(p.min()) * p.len()) if p.len() else None


def slot_test_cell(tests: pl.DataFrame, variant: str, task: str) -> dict[str, float | None]:
    """A Table 1 cell's slot test from the per-run rows of presdep.metrics.position_rows.slot_test_cells:
    the smallest p-value times the number of runs (Bonferroni, capped at 1: the slot matters in at
    least one dataset or seed) and the mean chance level of the slot share."""
    chance = _runs(tests, variant, task, "slot_share_chance")
    return {"slot_p_value": _bonferroni(_runs(tests, variant, task, "slot_p_value")),
            "slot_share_chance": float(chance.mean()) if chance.len() else None}


def grade_test_cell(tests: pl.DataFrame, variant: str, task: str) -> dict[str, float | None]:
    """A Table 1 cell's score-grade test from the same per-run rows (position_rows.POSITION_TEST_METRICS):
    the smallest one-sided p-value times the number of runs, capped at 1, as for the slot test."""
    return {GRADE_P_VALUE: _bonferroni(_runs(tests, variant, task, GRADE_P_VALUE))}


def vs_chance(tau_psi: float | None) -> float | None:
    """How far a tau-PSI cell is from chance (negative: more stable than unrelated rankings)."""
    return tau_psi - CHANCE_TAU_PSI if _defined(tau_psi) else None


__all__ = ["AGAINST_QRELS_ALPHA", "AT_CHANCE", "CHANCE_TAU_PSI", "DIAGNOSTICS", "GRADE_P_VALUE", "NO_GRADE_SIGNAL",
           "SLOT_ALPHA", "SLOT_DRIVEN", "TAU_PSI_COLUMNS", "diagnostic_columns", "findings", "grade_test_cell",
           "slot_test_cell", "vs_chance"]
