"""The row collector of the long ``metrics`` table (per-query rows and their aggregate)."""

from __future__ import annotations

import logging
import math

import numpy as np
import polars as pl

log = logging.getLogger(__name__)


class MetricRows:
    """Collects per-query and aggregate rows of the long metrics table."""

    def __init__(self) -> None:
        self.pert: list[str] = []
        self.qid: list[str | None] = []
        self.metric: list[str] = []
        self.value: list[float | None] = []

    def add(self, pert: str, qid: str | None, metric: str, value: float | None) -> None:
        v = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
        self.pert.append(pert)
        self.qid.append(qid)
        self.metric.append(metric)
        self.value.append(v)

    def per_query(self, pert: str, metric: str, qids: list[str], values) -> None:
        vals = [float(v) for v in values]
        for q, v in zip(qids, vals):
            self.add(pert, q, metric, v)
        finite = [v for v in vals if not math.isnan(v)]
        if len(finite) < len(vals):
            log.info(
                "%s/%s: %d of %d queries undefined (null), left out of the mean",
                pert, metric, len(vals) - len(finite), len(vals),
            )
        self.add(pert, None, metric, float(np.mean(finite)) if finite else None)

    def frame(self, *, dataset: str, variant: str, seed: int | None = None, task: str = "rerank") -> pl.DataFrame:
        """The rows as the ``metrics`` contract's long table of one (dataset, run)."""
        n = len(self.metric)
        return pl.DataFrame({
            "dataset": [dataset] * n, "task": [task] * n, "variant": [variant] * n,
            "seed": pl.Series([seed] * n, dtype=pl.Int32), "perturbation": self.pert,
            "query_id": pl.Series(self.qid, dtype=pl.String), "metric": self.metric,
            "value": pl.Series(self.value, dtype=pl.Float64),
        })
