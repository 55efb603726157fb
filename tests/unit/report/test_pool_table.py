"""The pool table: means per run and dataset, bootstrap contrasts against a brute-force loop, writers."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from presdep.contracts.errors import InvalidInput
from presdep.report.pool_table import (
    PoolTableSettings,
    pool_contrasts,
    pool_means,
    write_pool_table,
)

# run -> dataset -> query -> (replace pool_psi, drop pool_psi)
VALUES = {
    "a": {"d1": {"x": (0.30, 0.10), "y": (0.20, 0.25), "z": (0.05, 0.00)},
          "d2": {"p": (0.40, 0.35), "q": (0.10, 0.20), "r": (0.60, 0.30), "s": (0.15, 0.15)}},
    "b": {"d1": {"x": (0.10, 0.10), "y": (0.00, 0.05), "z": (0.20, 0.10)},
          "d2": {"p": (0.30, 0.30), "q": (0.00, 0.10), "r": (0.25, 0.05), "s": (0.35, 0.10), "t": (0.9, 0.9)}},
}


def metrics_frame(run: str, dataset: str) -> pl.DataFrame:
    rows = []
    for q, (rep, drp) in VALUES[run][dataset].items():
        rows += [(dataset, "rerank", run, None, "pool_replace", q, "pool_psi", rep),
                 (dataset, "rerank", run, None, "pool_drop", q, "pool_psi", drp),
                 (dataset, "rerank", run, None, "pool_drop", q, "top10_changed", float(drp > 0.2))]
    rows.append((dataset, "rerank", run, None, "pool_drop", None, "pool_psi", 123.0))  # aggregates are not re-read
    return pl.DataFrame(rows, schema={"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
                                      "perturbation": pl.String, "query_id": pl.String, "metric": pl.String,
                                      "value": pl.Float64}, orient="row")


# datasets listed out of order: the table sorts them
RUNS = {run: [metrics_frame(run, "d2"), metrics_frame(run, "d1")] for run in ("a", "b")}


def mean_of(means: pl.DataFrame, label: str, dataset: str, pert: str, metric: str = "pool_psi") -> float:
    sel = means.filter((pl.col("label") == label) & (pl.col("dataset") == dataset) & (pl.col("perturbation") == pert)
                       & (pl.col("metric") == metric))
    assert sel.height == 1
    return sel["value"][0]


def test_means_per_run_and_dataset_and_over_datasets():
    m = pool_means(RUNS)
    assert mean_of(m, "a", "d1", "pool_replace") == pytest.approx((0.30 + 0.20 + 0.05) / 3)
    assert mean_of(m, "a", "d2", "pool_drop") == pytest.approx((0.35 + 0.20 + 0.30 + 0.15) / 4)
    d1, d2 = (0.30 + 0.20 + 0.05) / 3, (0.40 + 0.10 + 0.60 + 0.15) / 4
    assert mean_of(m, "a", "all", "pool_replace") == pytest.approx((d1 + d2) / 2)
    assert mean_of(m, "a", "d1", "pool_replace_minus_drop") == pytest.approx((0.20 - 0.05 + 0.05) / 3)
    assert mean_of(m, "b", "d2", "pool_drop", "top10_changed") == pytest.approx(2 / 5)  # p and t
    assert m.filter(pl.col("label") == "a")["dataset"].unique(maintain_order=True).to_list() == ["d1", "d2", "all"]


def brute_force(a: str, b: str, pert: int, resamples: int, seed: int) -> np.ndarray:
    """Each resample by hand: datasets drawn with replacement, then each drawn copy's queries,
    the same draws for both runs, as the paired hierarchical bootstrap's generator yields them."""
    datasets = ["d1", "d2"]
    shared = {d: sorted(set(VALUES[a][d]) & set(VALUES[b][d])) for d in datasets}
    diff = {d: [VALUES[a][d][q][pert] - VALUES[b][d][q][pert] for q in shared[d]] for d in datasets}
    rng = np.random.default_rng(seed)
    dsel = rng.integers(0, 2, size=(resamples, 2))
    draws: dict[tuple[int, int], np.ndarray] = {}
    for d in range(2):
        rows, slots = np.nonzero(dsel == d)
        idx = rng.integers(0, len(shared[datasets[d]]), size=(rows.size, len(shared[datasets[d]])))
        for k, (r, s) in enumerate(zip(rows.tolist(), slots.tolist())):
            draws[(r, s)] = idx[k]
    out = np.empty(resamples)
    for r in range(resamples):
        total = 0.0
        for s in range(2):
            d = datasets[dsel[r, s]]
            picked = draws[(r, s)]
            total += sum(diff[d][i] for i in picked) / len(picked)
        out[r] = total / 2
    return out


def test_contrast_equals_a_brute_force_loop():
    settings = PoolTableSettings(resamples=400, seed=11, metrics=("pool_psi",))
    c = pool_contrasts(RUNS, [("a", "b")], settings)
    row = c.filter((pl.col("perturbation") == "pool_replace") & (pl.col("metric") == "pool_psi")).row(0, named=True)
    boot = brute_force("a", "b", 0, 400, 11)
    low, high = np.quantile(boot, [0.025, 0.975])
    assert row["ci_low"] == pytest.approx(low) and row["ci_high"] == pytest.approx(high)
    assert row["se"] == pytest.approx(np.std(boot, ddof=1))
    d1 = np.mean([0.20, 0.20, -0.15])
    d2 = np.mean([0.10, 0.10, 0.35, -0.20])  # query t is in run b only
    assert row["difference"] == pytest.approx((d1 + d2) / 2)
    assert (row["datasets"], row["queries"]) == (2, 7)
    drop = c.filter(pl.col("perturbation") == "pool_drop").row(0, named=True)
    assert drop["ci_low"] == pytest.approx(np.quantile(brute_force("a", "b", 1, 400, 11), 0.025))


def test_contrasts_cover_both_perturbations_and_replace_minus_drop():
    c = pool_contrasts(RUNS, [("a", "b")], PoolTableSettings(resamples=200))
    assert set(zip(c["perturbation"], c["metric"])) == {
        ("pool_replace", "pool_psi"), ("pool_drop", "pool_psi"), ("pool_drop", "top10_changed"),
        ("pool_replace_minus_drop", "pool_psi")}
    with pytest.raises(InvalidInput, match="no run labelled"):
        pool_contrasts(RUNS, [("a", "zz")], PoolTableSettings(resamples=200))


def test_one_run_per_label():
    with pytest.raises(InvalidInput, match="twice; one run per label"):
        pool_means({"a": [metrics_frame("a", "d1"), metrics_frame("a", "d1")]})


def test_writers_put_the_same_numbers_in_csv_and_markdown(tmp_path):
    means, contrasts = write_pool_table(RUNS, means_csv=tmp_path / "m.csv", markdown=tmp_path / "m.md",
                                        contrasts_csv=tmp_path / "c.csv", pairs=[("a", "b")],
                                        settings=PoolTableSettings(resamples=200))
    back = pl.read_csv(tmp_path / "m.csv")
    assert back.height == means.height
    assert back.filter((pl.col("label") == "a") & (pl.col("dataset") == "d1")
                       & (pl.col("perturbation") == "pool_replace"))["value"][0] == pytest.approx(0.55 / 3, abs=1e-6)
    assert pl.read_csv(tmp_path / "c.csv").height == contrasts.height == 4
    md = (tmp_path / "m.md").read_text()
    assert "| a | d1 | 3 | 0.1833 | 0.1167 | 0.3333 | +0.0667 |" in md  # no empty columns
    assert "| a - b | replace: pool_psi | +0.0854 |" in md
    assert "200 resamples, seed 0" in md
