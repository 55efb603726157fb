"""Why a Table 1 decision cell's decisions flipped: the shares of the flip ledger's causes
(docs/methods/flip-ledger.md), pooled over the cell's datasets and seeds by adding counts.

The metrics job writes each run's ledger counts as aggregate rows of perturbation
``flip_ledger`` (presdep.metrics.ledger_rows); a cell's share of a cause is the sum of its
counts over the cell's runs divided by the sum of their flips. The counts file carries the
flips and the shares of every decision cell, and the causes none of its flips could be tested
on; table1.md lists, per row, the causes of its decision flips. The remainder cause, stored as
``content``, is read as what it is: not explained by an additive slot effect (nor by any cause
before it, tested or not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from presdep.contracts.columns import COLUMN_TITLES, TABLE1_COLUMNS
from presdep.metrics.flip_ledger import CAUSE_WORDS, CAUSES, REMAINDER_WORDS, TESTED_CAUSES
from presdep.metrics.ledger_rows import LEDGER_PERTURBATION

# The ledger decision behind each Table 1 decision column.
DECISION_OF = {"rerank_jaccard": "retained", "qa_answer_flip": "answer", "resp_pair_flip": "pair"}
CAUSE_COLUMNS = ("flips", *(f"flip_{c}" for c in CAUSES), "flip_untested")
# The config that makes a cause testable where the run left it untested (the remainder may hold it).
TESTING_KEYS = {"noise": "`protocol.noise_rereads: 2` or more",
                "companions": "`within_chunk` in `protocol.perturbations`"}


def ledger_counts(metrics: pl.DataFrame) -> pl.DataFrame:
    """variant, task, metric, value: each ledger count summed over the variant's datasets and seeds."""
    rows = metrics.filter((pl.col("perturbation") == LEDGER_PERTURBATION) & pl.col("query_id").is_null()
                          & pl.col("value").is_not_null())
    return rows.group_by("variant", "task", "metric").agg(pl.col("value").sum())


def cell_causes(counts: pl.DataFrame, variant: str, column: str) -> dict[str, float | str | None]:
    """The counts file's flip columns of one cell: its flips and each cause's share (None when the
    column is no decision cell or the run has no ledger; shares None when nothing flipped)."""
    empty: dict[str, float | str | None] = {c: None for c in CAUSE_COLUMNS}
    decision = DECISION_OF.get(column)
    if decision is None:
        return empty
    mine = counts.filter((pl.col("variant") == variant) & (pl.col("task") == TABLE1_COLUMNS[column].task))
    got = dict(zip(mine["metric"], mine["value"]))
    flips = got.get(f"{decision}_flips")
    if flips is None:
        return empty
    out: dict[str, float | str | None] = {"flips": float(flips)}
    for cause in CAUSES:
        out[f"flip_{cause}"] = got.get(f"{decision}_{cause}", 0.0) / flips if flips else None
    # A cause no flip of the cell could be tested on (no re-reads, no within-chunk shuffles): said,
    # so its 0% is not read as "ruled out".
    untested = [c for c in TESTED_CAUSES if flips and not got.get(f"{decision}_{c}_tested")]
    out["flip_untested"] = " ".join(untested) if flips else None
    return out


def causes_text(causes: Mapping[str, float | None]) -> str:
    """'204 flips: slot 41%, not explained by an additive slot effect 59%' (causes with a share above
    0, in the ledger's order, each in CAUSE_WORDS)."""
    flips = causes.get("flips")
    if not flips:
        return "no flips" if flips == 0 else ""
    said = [f"{CAUSE_WORDS[c]} {causes[f'flip_{c}']:.0%}" for c in CAUSES if causes.get(f"flip_{c}")]
    untested = causes.get("flip_untested")
    return f"{int(flips)} flips: {', '.join(said)}" + (f" ({untested.replace(' ', ', ')} untested)" if untested else "")


def causes_line(by_label: Mapping[str, Mapping[str, Mapping[str, float | None]]],
                columns: Sequence[str], docs: str = "../docs/methods/") -> str:
    """table1.md's list: per row, why its decisions flipped, one line each ('' if no ledger).
    ``docs``: the path from table1.md to docs/methods/."""
    parts = []
    for label, cells in by_label.items():
        said = [f"{COLUMN_TITLES[c]} {causes_text(cells[c])}" for c in columns if c in cells and causes_text(cells[c])]
        if said:
            parts.append(f"- {label}: {'; '.join(said)}")
    if not parts:
        return ""
    testing = "; ".join(f"{TESTING_KEYS[c]} tests {c}" for c in TESTING_KEYS)
    return (f"\nWhy decisions flipped (the first cause of each flip: {', '.join(TESTED_CAUSES)}; "
            f"\"{REMAINDER_WORDS}\" is the rest: none of these explained it, and a flip an untested cause "
            f"would explain lands there too ({testing}); [flip ledger]({docs}flip-ledger.md)):\n"
            + "\n".join(parts) + "\n")


__all__ = ["CAUSE_COLUMNS", "DECISION_OF", "TESTING_KEYS", "causes_line", "causes_text", "cell_causes", "ledger_counts"]
