"""Position rows of the metrics table: where the scores come from, and whether the slot matters.

Computed on the raw single-pass random shuffles (BSC's too, before averaging), under
perturbation ``random_shuffle`` (docs/methods/position.md):

* per query (and their mean): ``spearman_slot_score``, ``spearman_score_grade``,
  ``var_share_doc`` / ``var_share_slot`` / ``var_share_residual``, ``slot_share_chance``;
* aggregate only: ``spearman_score_grade_p_value``, the one-sided permutation test within
  queries of "the mean score-grade Spearman is not below 0" (position.score_grade_p_value);
* aggregate only: the slot profile ``slot_mean_sNN``, ``slot_centred_mean_sNN`` and their
  ``*_ci95_sNN`` normal half-widths (rows as independent); the query-clustered bootstrap
  interval of the centred mean, ``slot_centred_ci95_clustered_low_sNN`` / ``_high_sNN``; the
  permutation test ``slot_p_value`` and its null mean ``slot_share_null_mean``.

:func:`slot_test_cells` reads the tests back per run from a (concatenated) metrics table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl

from presdep.contracts.views import RANDOM_SHUFFLE
from presdep.metrics import position, slot_test
from presdep.metrics.rows import MetricRows

# The aggregate rows slot_test_cells returns, one column each.
SLOT_TEST_METRICS = ("var_share_slot", "slot_share_chance", "slot_share_null_mean", "slot_p_value")
# The score-grade test's aggregate row (read back the same way).
GRADE_P_VALUE = "spearman_score_grade_p_value"
POSITION_TEST_METRICS = (*SLOT_TEST_METRICS, GRADE_P_VALUE)
_RUN = ("variant", "task", "dataset", "seed")


def add_position_rows(rows: MetricRows, scores: pl.DataFrame, qrels_d: Mapping) -> None:
    """The position rows of one run's ``scores`` (none without random shuffles or a slot column)."""
    shuffles = scores.filter(pl.col("perturbation") == RANDOM_SHUFFLE)
    if shuffles.height == 0 or "slot" not in shuffles.columns:
        return
    cols = shuffles.select("query_id", "doc_id", "presentation", "slot", "score").to_dict(as_series=False)
    blocks = [b for b in position.query_blocks(cols, qrels_d) if b[1].shape[0] >= 2]
    if not blocks:
        return
    qids = [q for q, *_ in blocks]
    rows.per_query(RANDOM_SHUFFLE, "spearman_slot_score", qids,
                   [position.slot_score_spearman(sc, sl) for _, sc, sl, _ in blocks])
    rows.per_query(RANDOM_SHUFFLE, "spearman_score_grade", qids,
                   [position.score_grade_spearman(sc, g) for _, sc, _, g in blocks])
    rows.add(RANDOM_SHUFFLE, None, GRADE_P_VALUE, position.score_grade_p_value([(sc, g) for _, sc, _, g in blocks]))
    shares = [position.variance_shares(sc, sl) for _, sc, sl, _ in blocks]
    for i, part in enumerate(("doc", "slot", "residual")):
        rows.per_query(RANDOM_SHUFFLE, f"var_share_{part}", qids, [s[i] for s in shares])
    # The chance level where the share is defined, so their means cover the same queries.
    rows.per_query(RANDOM_SHUFFLE, "slot_share_chance", qids,
                   [math.nan if math.isnan(s[1]) else slot_test.slot_share_chance(sl)
                    for (_, _, sl, _), s in zip(blocks, shares)])
    pairs = [(sc, sl) for _, sc, sl, _ in blocks]
    profile = position.slot_profile(pairs)
    for j, slot in enumerate(profile["slot"]):
        for key in ("mean", "ci95", "centred_mean", "centred_ci95"):
            rows.add(RANDOM_SHUFFLE, None, f"slot_{key}_s{int(slot):02d}", profile[key][j])
    clustered = slot_test.clustered_slot_intervals(pairs)
    for j, slot in enumerate(clustered["slot"]):
        for key in ("low", "high"):
            rows.add(RANDOM_SHUFFLE, None, f"slot_centred_ci95_clustered_{key}_s{int(slot):02d}", clustered[key][j])
    test = slot_test.slot_permutation_test(pairs)
    rows.add(RANDOM_SHUFFLE, None, "slot_p_value", test.p_value)
    rows.add(RANDOM_SHUFFLE, None, "slot_share_null_mean", test.null_mean)


def slot_test_cells(metrics: pl.DataFrame, names: tuple[str, ...] = SLOT_TEST_METRICS) -> pl.DataFrame:
    """Per run of a (concatenated) metrics table: variant, task, dataset, seed, then the aggregate
    random-shuffle rows of ``names`` (SLOT_TEST_METRICS, or POSITION_TEST_METRICS with the
    score-grade test) as columns (null where a run lacks one), sorted by run. Runs without any
    of them (no random shuffles scored) are absent."""
    agg = metrics.filter((pl.col("perturbation") == RANDOM_SHUFFLE) & pl.col("query_id").is_null()
                         & pl.col("metric").is_in(list(names)))
    schema = {**{c: metrics.schema[c] for c in _RUN}, **{m: pl.Float64 for m in names}}
    if agg.height == 0:
        return pl.DataFrame(schema=schema)
    keys = agg.select(*_RUN).unique()
    out = keys
    for m in names:
        part = agg.filter(pl.col("metric") == m).select(*_RUN, pl.col("value").cast(pl.Float64).alias(m))
        out = out.join(part, on=list(_RUN), how="left", nulls_equal=True)
    return out.select(list(schema)).sort(*_RUN, nulls_last=False)


__all__ = ["GRADE_P_VALUE", "POSITION_TEST_METRICS", "SLOT_TEST_METRICS", "add_position_rows", "slot_test_cells"]
