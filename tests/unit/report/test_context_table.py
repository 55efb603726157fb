"""The context-decomposition table: the query bootstrap against a brute-force loop, the scaffold
share, the Markdown rows."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from presdep.report.bootstrap import percentile_interval
from presdep.report.context_table import context_table, query_bootstrap, to_markdown, write_context_table


def test_query_bootstrap_equals_a_brute_force_loop():
    values = np.array([0.1, -0.2, 0.05, 0.3, 0.0, 0.12])
    rng = np.random.default_rng(7)
    means = []
    for _ in range(500):
        idx = rng.integers(0, len(values), size=len(values))
        means.append(sum(values[i] for i in idx) / len(values))
    low, high = percentile_interval(np.array(means))
    assert query_bootstrap(values, 500, 7) == (pytest.approx(low), pytest.approx(high))


def _metrics(label_shift: float) -> pl.DataFrame:
    rows = []
    for pert in ("context_canonical", "context_shuffled"):
        for q, (w, s) in enumerate([(0.2, 0.05), (0.1, 0.05), (0.3, 0.2)]):
            rows += [(pert, f"q{q}", "width", w + label_shift), (pert, f"q{q}", "skeleton", s),
                     (pert, f"q{q}", "ndcg10_A1", 0.5), (pert, f"q{q}", "ndcg10_A4", 0.5 + s)]
    rows += [("context_donors", None, "companions", 60.0), ("context_donors", None, "length_error_mean", 2.0)]
    n = len(rows)
    return pl.DataFrame({"dataset": ["dl19"] * n, "task": ["rerank"] * n, "variant": ["v"] * n,
                         "seed": pl.Series([None] * n, dtype=pl.Int32), "perturbation": [r[0] for r in rows],
                         "query_id": pl.Series([r[1] for r in rows], dtype=pl.String),
                         "metric": [r[2] for r in rows], "value": [r[3] for r in rows]})


def test_means_intervals_and_scaffold_share(tmp_path):
    table = context_table({"Off the shelf": _metrics(0.0)})
    got = {(r["perturbation"], r["metric"]): r for r in table.iter_rows(named=True)}
    width = got[("context_canonical", "width")]
    assert width["value"] == pytest.approx(0.2) and width["queries"] == 3
    assert width["ci_low"] <= 0.2 <= width["ci_high"]
    assert got[("context_canonical", "ndcg10_A1")]["ci_low"] is None  # arms get no interval
    assert got[("context_canonical", "scaffold_share")]["value"] == pytest.approx(0.1 / 0.2)
    assert got[("context_donors", "companions")]["value"] == 60.0
    md = to_markdown(table)
    assert "| Off the shelf | dl19 | canonical | 3 |" in md and "scaffold share" in md and "| 60 | 2.0000 |" in md
    write_context_table({"Off the shelf": _metrics(0.0)}, csv=tmp_path / "c.csv", markdown=tmp_path / "c.md")
    assert (tmp_path / "c.csv").read_text().startswith("label,dataset,perturbation,metric,value,ci_low,ci_high")


def test_a_zero_width_has_no_scaffold_share():
    table = context_table({"flat": _metrics(-0.2).with_columns(
        pl.when(pl.col("metric") == "width").then(0.0).otherwise(pl.col("value")).alias("value"))})
    share = table.filter(pl.col("metric") == "scaffold_share")["value"].to_list()
    assert share == [None, None]
