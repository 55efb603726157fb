"""Which slot a Table 1 cell's slot effect favours or penalises, from the metrics' slot profile.

The metrics hold, per run, the document-centred mean score at each slot
(``slot_centred_mean_sNN``, presdep.metrics.position; 0 everywhere when the slot does not
matter). A cell's profile is averaged like its value (over datasets within a seed, then over
seeds); the slot it names is the one furthest from 0, 1-based as a reader counts slots.
"""

from __future__ import annotations

import polars as pl

from presdep.contracts.views import RANDOM_SHUFFLE

_PREFIX = "slot_centred_mean_s"


def slot_profiles(metrics: pl.DataFrame) -> dict[tuple[str, str], tuple[int, float]]:
    """(variant, task) -> (1-based slot, its centred mean score): the slot furthest from 0
    (ties: the first slot)."""
    rows = metrics.filter(pl.col("metric").str.starts_with(_PREFIX) & pl.col("query_id").is_null()
                          & (pl.col("perturbation") == RANDOM_SHUFFLE) & pl.col("value").is_not_null()
                          & pl.col("value").is_not_nan())
    if rows.height == 0:
        return {}
    by_seed = (rows.with_columns(pl.col("seed").fill_null(-1))
               .group_by("variant", "task", "metric", "seed").agg(pl.col("value").mean())
               .group_by("variant", "task", "metric").agg(pl.col("value").mean()))
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for (variant, task), group in sorted(by_seed.group_by("variant", "task"), key=lambda kv: kv[0]):
        slots = sorted((int(m.removeprefix(_PREFIX)), v) for m, v in zip(group["metric"], group["value"]))
        slot, value = max(slots, key=lambda sv: (abs(sv[1]), -sv[0]))
        out[(variant, task)] = (slot + 1, float(value))
    return out
