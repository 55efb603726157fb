"""The fixed-weight width (presdep.report.width) against hand-computed values: C_obs and V_B per
seed and their mean and sample SD over seeds, the paired prompt bootstrap against a loop
re-implementation on the same draws, a query on one side only dropped and counted, an
order-invariant scorer's exact zeros, and the Markdown's rows."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_table, write_table
from presdep.report.width import Collection, resampled_widths, to_markdown, width_table, write_width

SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}
PAIRS = {"c1": "c1_b1", "c2": "c2_b1"}
# (variant, seed, collection): per query (q1, q2) of the native single pass, the native
# order-averaged ranking and the B = 1 pass.
VALUES = {
    ("t", 1, "c1"): {"native": (0.5, 0.7), "averaged": (0.6, 0.8), "single": (0.4, 0.4)},  # C 0.2, V 0.3
    ("t", 1, "c2"): {"native": (0.3, 0.5), "averaged": (0.5, 0.5), "single": (0.2, 0.4)},  # C 0.1, V 0.2
    ("t", 2, "c1"): {"native": (0.6, 0.8), "averaged": (0.7, 0.7), "single": (0.4, 0.4)},  # C 0.3, V 0.3
    ("t", 2, "c2"): {"native": (0.3, 0.5), "averaged": (0.5, 0.5), "single": (0.2, 0.4)},  # C 0.1, V 0.2
    ("u", None, "c1"): {"native": (0.9, 0.7), "averaged": (0.8, 0.8), "single": (0.6, 0.6)},  # C 0.2, V 0.2
    ("u", None, "c2"): {"native": (0.4, 0.4), "averaged": (0.5, 0.3), "single": (0.5, 0.5)},  # C -0.1, V -0.1
    # an order-invariant scorer: the same scores whatever the width, so the same nDCG everywhere
    ("inv", None, "c1"): {"native": (0.1, 0.3), "averaged": (0.1, 0.3), "single": (0.1, 0.3)},
    ("inv", None, "c2"): {"native": (0.7, 0.2), "averaged": (0.7, 0.2), "single": (0.7, 0.2)},
}
WHERE = {"native": ("first_stage", "ndcg@10"), "averaged": ("random_shuffle", "ndcg10_order_averaged"),
         "single": ("first_stage", "ndcg@10")}


def _metrics(values=VALUES, extra=()) -> pl.DataFrame:
    rows = []
    for (variant, seed, collection), sides in values.items():
        for side, per_query in sides.items():
            dataset = PAIRS[collection] if side == "single" else collection
            perturbation, metric = WHERE[side]
            for q, v in zip(("q1", "q2"), per_query):
                rows.append((dataset, "rerank", variant, seed, perturbation, q, metric, v))
            rows.append((dataset, "rerank", variant, seed, perturbation, None, metric, sum(per_query) / 2))
    rows += list(extra)
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def _variants() -> dict[str, Variant]:
    base = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
            "bsc_ensembles": 4}
    labels = {"t": "Trained", "u": "Untrained", "inv": "Invariant"}
    return {n: Variant.checked({**base, "label": lab}, n) for n, lab in labels.items()}


def _row(table: pl.DataFrame, label: str, seed: int | None = None) -> dict:
    hit = table.filter((pl.col("label") == label)
                       & (pl.col("seed").is_null() if seed is None else pl.col("seed") == seed))
    assert hit.height == 1
    return hit.row(0, named=True)


def _summary(summary: pl.DataFrame, label: str) -> dict:
    hit = summary.filter(pl.col("label") == label)
    assert hit.height == 1
    return hit.row(0, named=True)


def test_c_obs_and_v_b_per_seed_then_mean_and_sample_sd_over_seeds():
    per_seed, summary = width_table(_metrics(), PAIRS, _variants(), resamples=200, seed=0)
    s1, s2 = _row(per_seed, "Trained", 1), _row(per_seed, "Trained", 2)
    # seed 1: C (0.2 + 0.1) / 2, V (0.3 + 0.2) / 2; seed 2: C (0.3 + 0.1) / 2, V (0.3 + 0.2) / 2
    assert (s1["c_obs"], s1["v_b"]) == pytest.approx((0.15, 0.25))
    assert (s2["c_obs"], s2["v_b"]) == pytest.approx((0.20, 0.25))
    assert (s1["collections"], s1["queries"], s1["dropped"], s1["datasets"]) == (2, 4, 0, "c1 c2")
    trained = _summary(summary, "Trained")
    # sample SD of (0.15, 0.20): sqrt(2 * 0.025^2 / 1)
    assert trained["c_obs_mean"] == pytest.approx(0.175)
    assert trained["c_obs_sd"] == pytest.approx(np.sqrt(2 * 0.025 ** 2))
    assert (trained["v_b_mean"], trained["v_b_sd"]) == pytest.approx((0.25, 0.0))
    assert (trained["seeds"], trained["collections"], trained["task"]) == (2, 2, "rerank")
    untrained = _summary(summary, "Untrained")
    assert untrained["c_obs_mean"] == pytest.approx(0.05) and untrained["v_b_mean"] == pytest.approx(0.05)
    assert untrained["c_obs_sd"] is None and untrained["v_b_sd"] is None and untrained["seeds"] == 1
    assert summary["label"].to_list() == ["Trained", "Untrained", "Invariant"]  # config order


def test_an_order_invariant_scorer_has_exactly_zero_width_effect():
    per_seed, summary = width_table(_metrics(), PAIRS, _variants(), resamples=500, seed=0)
    inv = _row(per_seed, "Invariant")
    assert (inv["c_obs"], inv["v_b"]) == (0.0, 0.0)
    assert (inv["c_obs_low"], inv["c_obs_high"], inv["v_b_low"], inv["v_b_high"]) == (0.0, 0.0, 0.0, 0.0)
    assert _summary(summary, "Invariant")["c_obs_mean"] == 0.0


def test_the_bootstrap_equals_a_loop_over_the_same_draws():
    # dyadic values: every mean below is exact, so the two ways must agree bit for bit
    cols = [Collection("a", 0.0, 0.0, np.array([0.25, -0.5, 0.125, 0.0]), np.array([0.5, 0.5, -0.25, 0.75]), 0),
            Collection("b", 0.0, 0.0, np.array([0.0625, 0.375]), np.array([-0.125, 0.25]), 0)]
    c_boot, v_boot = resampled_widths(cols, 200, seed=3)
    rng = np.random.Generator(np.random.PCG64(3))
    draws = [rng.integers(0, c.c_diff.size, size=(200, c.c_diff.size)) for c in cols]
    c_loop, v_loop = np.empty(200), np.empty(200)
    for r in range(200):
        c_sum = v_sum = 0.0
        for col, idx in zip(cols, draws):
            c_sum += sum(col.c_diff[i] for i in idx[r]) / col.c_diff.size
            v_sum += sum(col.v_diff[i] for i in idx[r]) / col.v_diff.size
        c_loop[r], v_loop[r] = c_sum / 2, v_sum / 2
    assert np.array_equal(c_boot, c_loop) and np.array_equal(v_boot, v_loop)
    assert np.unique(c_boot).size > 10  # the draws really vary
    # the 95% percentile interval by hand: linear interpolation between order statistics
    srt = np.sort(c_loop)
    for p, got in zip((0.025, 0.975), np.quantile(c_boot, [0.025, 0.975])):
        h = (200 - 1) * p
        lo = int(np.floor(h))
        assert got == pytest.approx(srt[lo] + (h - lo) * (srt[lo + 1] - srt[lo]), abs=1e-15)


def test_the_per_seed_interval_comes_from_the_shared_draws():
    per_seed, _ = width_table(_metrics(), PAIRS, _variants(), resamples=300, seed=5)
    s1 = _row(per_seed, "Trained", 1)
    # seed 1's per-query differences: C c1 (0.1, 0.3), c2 (0.1, 0.1); V c1 (0.2, 0.4), c2 (0.3, 0.1)
    cols = [Collection("c1", 0.2, 0.3, np.array([0.5, 0.7]) - 0.4, np.array([0.6, 0.8]) - 0.4, 0),
            Collection("c2", 0.1, 0.2, np.array([0.3, 0.5]) - np.array([0.2, 0.4]),
                       np.array([0.5, 0.5]) - np.array([0.2, 0.4]), 0)]
    c_boot, v_boot = resampled_widths(cols, 300, seed=5)
    assert (s1["c_obs_low"], s1["c_obs_high"]) == pytest.approx(tuple(np.quantile(c_boot, [0.025, 0.975])))
    assert (s1["v_b_low"], s1["v_b_high"]) == pytest.approx(tuple(np.quantile(v_boot, [0.025, 0.975])))
    # C's resamples lie between the smallest and largest possible means: (0.1 + 0.1) / 2 and (0.3 + 0.1) / 2
    assert s1["c_obs_low"] >= 0.1 - 1e-12 and s1["c_obs_high"] <= 0.2 + 1e-12 and s1["c_obs_low"] < s1["c_obs_high"]


def test_a_query_on_one_side_only_is_dropped_from_every_side_and_counted():
    extra = [("c1", "rerank", "t", 1, "first_stage", "q3", "ndcg@10", 1.0),  # native only
             ("c2_b1", "rerank", "t", 1, "first_stage", "q9", "ndcg@10", 0.0)]  # B = 1 only
    per_seed, _ = width_table(_metrics(extra=extra), PAIRS, _variants(), resamples=100, seed=0)
    s1 = _row(per_seed, "Trained", 1)
    assert (s1["queries"], s1["dropped"]) == (4, 2)
    assert s1["c_obs"] == pytest.approx(0.15)  # the aggregates are the point estimate
    # q3's difference (1.0 - nothing) never enters: every resample stays within [0.1, 0.2]
    assert s1["c_obs_high"] <= 0.2 + 1e-12
    assert _row(per_seed, "Trained", 2)["dropped"] == 0


def test_v_b_is_null_without_order_averaged_rows_and_c_obs_stays():
    no_averaged = {k: {s: v for s, v in sides.items() if s != "averaged"} for k, sides in VALUES.items()}
    per_seed, summary = width_table(_metrics(no_averaged), PAIRS, _variants(), resamples=100, seed=0)
    s1 = _row(per_seed, "Trained", 1)
    assert s1["c_obs"] == pytest.approx(0.15) and s1["v_b"] is None and s1["v_b_low"] is None
    assert s1["c_obs_low"] is not None and _summary(summary, "Trained")["v_b_mean"] is None


def test_pairs_that_clash_and_a_row_with_two_variants_on_one_task_are_refused():
    with pytest.raises(InvalidInput, match="share a B = 1 alias"):
        width_table(_metrics(), {"c1": "x", "c2": "x"}, _variants(), resamples=10)
    variants = _variants()
    variants["u"] = Variant.checked({**variants["u"].as_dict(), "label": "Trained"}, "u")
    twin = {k: v for k, v in VALUES.items() if k[0] != "u"}
    twin[("u", 1, "c1")] = VALUES[("t", 1, "c1")]
    with pytest.raises(InvalidInput, match="two variants of row 'Trained'"):
        width_table(_metrics(twin), PAIRS, variants, resamples=10)


def test_markdown_rows():
    per_seed, summary = width_table(_metrics(), PAIRS, _variants(), resamples=200, seed=0)
    md = to_markdown(per_seed, summary, resamples=200, seed=0)
    assert "| Trained | rerank | +0.1750 | +0.0354 | +0.2500 | +0.0000 | 2 | 2 |" in md
    assert "| Untrained | rerank | +0.0500 |  | +0.0500 |  | 1 | 2 |" in md
    assert "| Invariant | rerank |  | +0.0000 | [+0.0000, +0.0000] | +0.0000 | [+0.0000, +0.0000] | 2 | 4 | 0 |" in md
    s1 = _row(per_seed, "Trained", 1)
    assert (f"| Trained | rerank | 1 | +0.1500 | [{s1['c_obs_low']:+.4f}, {s1['c_obs_high']:+.4f}] | +0.2500 |"
            in md)
    assert "200 resamples, seed 0" in md
    assert to_markdown(per_seed.clear(), summary.clear()).startswith("No row has")


def test_write_width_writes_the_per_seed_csv_and_the_markdown(tmp_path):
    path = tmp_path / "m.parquet"
    write_table(_metrics(), path, "metrics")
    assert read_table(path, "metrics").height == _metrics().height
    out_csv, out_md = tmp_path / "width.csv", tmp_path / "width.md"
    per_seed, summary = write_width([path], PAIRS, _variants(), out_csv, out_md, resamples=50, seed=1)
    written = pl.read_csv(out_csv)
    assert written.height == per_seed.height == 4 and summary.height == 3
    assert written["c_obs"].to_list() == pytest.approx(per_seed["c_obs"].to_list(), abs=1e-6)
    assert "| Trained | rerank | 2 | +0.2000 |" in out_md.read_text()
