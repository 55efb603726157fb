"""The per-query rows of one Table 1 column, looked up in a (concatenated) metrics table.

Shared by the stability analysis and the JSON run-report export; the column
definitions themselves live in presdep.contracts.columns.
"""

from __future__ import annotations

import polars as pl

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.errors import StabilityError

_NEED = {"dataset", "task", "variant", "seed", "perturbation", "query_id", "metric", "value"}


def column_values(metrics: pl.DataFrame, column: str, where: str = "metrics") -> pl.DataFrame:
    """Per-query rows of one Table 1 column: dataset, variant, seed, query_id, value."""
    if column not in TABLE1_COLUMNS:
        raise StabilityError(f"{where}: unknown Table 1 column {column!r}; known: {list(TABLE1_COLUMNS)}")
    spec = TABLE1_COLUMNS[column]
    missing = sorted(_NEED - set(metrics.columns))
    if missing:
        raise StabilityError(f"{where}: metrics table lacks column(s) {missing}")
    return metrics.filter(
        (pl.col("task") == spec.task)
        & (pl.col("metric") == spec.metric)
        & (pl.col("perturbation") == spec.perturbation)
        & pl.col("query_id").is_not_null()
    ).select("dataset", "variant", "seed", "query_id", "value")
