"""Metric discordance (presdep.report.discordance) on hand-built aggregate rows: per collection the
best nDCG@10 row against the best Jaccard row, ties to config order, the count and the spreads."""

from __future__ import annotations

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.report.discordance import discordance, sentence, to_markdown

SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}
# (dataset, variant, seed): (nDCG@10, Jaccard)
CELLS = {("a", "x", None): (0.70, 0.40), ("a", "y", None): (0.65, 0.80), ("a", "z", 1): (0.60, 0.50),
         ("a", "z", 2): (0.62, 0.70),  # z on a: means 0.61, 0.60
         ("b", "x", None): (0.50, 0.90), ("b", "y", None): (0.50, 0.90), ("b", "z", 1): (0.40, 0.20),
         ("b", "z", 2): (0.40, 0.20),
         ("a", "bm25", None): (0.55, 1.0), ("b", "bm25", None): (0.45, 1.0)}


def _metrics() -> pl.DataFrame:
    rows = []
    for (d, v, s), (q, j) in CELLS.items():
        rows.append((d, "rerank", v, s, "first_stage", None, "ndcg@10", q))
        rows.append((d, "rerank", v, s, "random_shuffle", None, "jaccard", j))
    rows.append(("b", "rerank", "y", None, "random_shuffle", None, "warn_few_test_queries", 1.0))
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def _variants() -> dict[str, Variant]:
    base = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
            "bsc_ensembles": 4}
    specs = {"bm25": {"scorer": "identity", "label": "First stage"}, "x": {"label": "X"}, "y": {"label": "Y"},
             "z": {"label": "Z"}}
    return {n: Variant.checked({**base, "model": None if s.get("scorer") == "identity" else "m", **s}, n)
            for n, s in specs.items()}


def test_per_collection_winners_ties_to_config_order_and_the_spreads():
    table, summary = discordance(_metrics(), _variants())
    rows = {r["dataset"]: r for r in table.iter_rows(named=True)}
    assert (rows["a"]["best_ndcg10"], rows["a"]["best_jaccard"], rows["a"]["differ"]) == ("X", "Y", True)
    # b: X and Y tie on both; config order gives X both times
    assert (rows["b"]["best_ndcg10"], rows["b"]["best_jaccard"], rows["b"]["differ"]) == ("X", "X", False)
    assert rows["b"]["degenerate"] == "Y" and rows["a"]["rows"] == 3  # the identity row is left out by default
    # row means over collections: X (0.6, 0.65), Y (0.575, 0.85), Z (0.505, 0.40)
    assert summary["differ"] == 1 and summary["collections"] == 2
    assert summary["ndcg10_spread"] == pytest.approx(0.6 - 0.505) and summary["jaccard_spread"] == pytest.approx(0.45)
    assert sentence(summary).startswith("On 1 of 2 collections the row with the highest nDCG@10 is not")
    md = to_markdown(table, summary)
    assert "| a | X | 0.7000 | Y | 0.8000 | yes | - | - | - | 3 |" in md and "b: Y" in md


def test_chosen_rows_and_unknown_labels():
    table, _ = discordance(_metrics(), _variants(), rows=["First stage", "Z"])
    assert table["best_jaccard"].to_list() == ["First stage", "First stage"]
    with pytest.raises(ValueError, match="not Table 1 labels"):
        discordance(_metrics(), _variants(), rows=["X", "W"])
