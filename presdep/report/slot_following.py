"""Whose first-stage-order quality copies the first stage: rows whose scores follow the slot.

A scorer whose scores follow the presented slot ranks the first-stage order much as it was
presented, so its one pass over that order (Table 1's nDCG, the paper's cell) repeats the
first stage's quality; its mean over the random shuffles is the comparison that reads the
scorer. A row "follows the slot" on a task when its tau-PSI cell there raises Table 1's slot
flag (presdep.report.diagnosis.findings: the slot test's Bonferroni p below SLOT_ALPHA, else the
slot's variance share); contrasts and discordance flag such a row's first-stage-order nDCG and
put the shuffle-mean comparison beside it (docs/methods/contrasts.md, discordance.md).
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.metrics.position_rows import slot_test_cells
from presdep.report import diagnosis
from presdep.report.tables import cell_values

COPIED_NOTE = ("scores follow the slot (Table 1's slot flag), so its first-stage-order nDCG copies the "
               "first stage's order; read the shuffle-mean comparison beside it")


class SlotFollowing:
    """The slot flag of each (variant, task) of one metrics table, computed once."""

    def __init__(self, metrics: pl.DataFrame) -> None:
        self._tests = slot_test_cells(metrics)
        self._share = cell_values(metrics, diagnosis.diagnostic_columns("var_share_slot"))

    def variant(self, variant: str, task: str) -> bool:
        column = next((c for c in diagnosis.TAU_PSI_COLUMNS if TABLE1_COLUMNS[c].task == task), None)
        if column is None:
            return False
        hit = self._share.filter((pl.col("variant") == variant) & (pl.col("column") == column))
        share = float(hit["value"][0]) if hit.height else None
        said = diagnosis.findings(None, {"var_share_slot": share,
                                         **diagnosis.slot_test_cell(self._tests, variant, task)})
        return "slot" in said

    def any_of(self, variants: Iterable[str], task: str) -> bool:
        """Whether any of a row's variants (a trained objective has one per task pool) follows the slot."""
        return any(self.variant(v, task) for v in variants)


__all__ = ["COPIED_NOTE", "SlotFollowing"]
