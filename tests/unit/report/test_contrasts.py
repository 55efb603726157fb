"""Contrasts between rows (presdep.report.contrast_bootstrap, presdep.report.contrasts) against
hand-computed values: the full-sample difference, the hierarchical bootstrap's interval where its
distribution is known exactly, the SE against the analytic one, pairing, TOST inside and outside
the margin, the paper's pairs and the amortization terms."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.report.contrast_bootstrap import Side, full_value, paired_difference, tost_p
from presdep.report.contrasts import Settings, contrast_table, paper_pairs, to_markdown

SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}


def _sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_the_full_sample_difference_weighs_datasets_then_seeds_equally():
    # dataset 1: 2 queries, dataset 2: 4; seeds 0 and 1 of a; b one run
    a = Side([np.array([[1.0, 3.0], [3.0, 5.0]]), np.array([[0.0, 0.0, 0.0, 4.0], [2.0, 2.0, 2.0, 2.0]])], (0, 1))
    b = Side([np.array([[1.0, 1.0]]), np.array([[0.0, 0.0, 0.0, 0.0]])], (None,))
    # a: seed 0 (2 + 1) / 2 = 1.5, seed 1 (4 + 2) / 2 = 3; mean 2.25; b: (1 + 0) / 2 = 0.5
    assert full_value(a) == pytest.approx(2.25) and full_value(b) == pytest.approx(0.5)
    assert paired_difference(a, b, resamples=200, seed=1, margin=0.005).estimate == pytest.approx(1.75)


def test_dataset_resampling_gives_the_known_two_point_distribution():
    """Two datasets of constant differences 0.1 and 0.3: a resample is the mean of two dataset draws,
    0.1, 0.2 or 0.3 with probability 1/4, 1/2, 1/4: interval [0.1, 0.3], SE sqrt(0.005) = 0.0707."""
    a = Side([np.full((1, 50), 0.1), np.full((1, 30), 0.3)], (None,))
    b = Side([np.zeros((1, 50)), np.zeros((1, 30))], (None,))
    d = paired_difference(a, b, resamples=20000, seed=7, margin=0.005)
    assert (d.low, d.high) == pytest.approx((0.1, 0.3)) and d.estimate == pytest.approx(0.2)
    assert d.se == pytest.approx(math.sqrt(0.005), rel=0.03) and d.excludes_zero
    values, counts = np.unique(np.round(d.boot, 12), return_counts=True)
    assert values.tolist() == pytest.approx([0.1, 0.2, 0.3]) and counts / counts.sum() == pytest.approx(
        [0.25, 0.5, 0.25], abs=0.01)


def test_query_resampling_se_is_the_standard_error_of_the_mean_difference():
    rng = np.random.default_rng(0)
    diff = rng.normal(0.02, 0.1, size=400)
    base = rng.uniform(size=400)
    a, b = Side([(base + diff)[None, :]], (None,)), Side([base[None, :]], (None,))
    d = paired_difference(a, b, resamples=20000, seed=3, margin=0.005)
    assert d.se == pytest.approx(diff.std(ddof=1) / math.sqrt(400), rel=0.05)  # the paired (not pooled) SE
    assert d.low < d.estimate < d.high and d.estimate == pytest.approx(diff.mean())
    again = paired_difference(a, b, resamples=20000, seed=3, margin=0.005)
    assert np.array_equal(again.boot, d.boot)  # a fixed seed: the same resamples


def test_seeds_are_resampled_and_paired_when_both_rows_share_them():
    # a's seeds read 0.2 and 0.6 everywhere; b has one run at 0: a resample is the mean of two seed
    # draws (0.2, 0.4 or 0.6): interval [0.2, 0.6]
    a = Side([np.array([[0.2] * 20, [0.6] * 20])], (1, 2))
    d = paired_difference(a, Side([np.zeros((1, 20))], (None,)), resamples=5000, seed=0, margin=0.005)
    assert (d.low, d.high) == pytest.approx((0.2, 0.6))
    # the same seeds on both sides, a = b + 0.1 in every seed: paired draws leave exactly 0.1
    b2 = Side([np.array([[0.1] * 20, [0.5] * 20])], (1, 2))
    a2 = Side([b2.values[0] + 0.1], (1, 2))
    paired = paired_difference(a2, b2, resamples=5000, seed=0, margin=0.005)
    assert (paired.low, paired.high, paired.se) == pytest.approx((0.1, 0.1, 0.0), abs=1e-12)


def test_tost_inside_and_outside_the_margin():
    inside = tost_p(0.001, 0.001, 0.005)
    assert inside == pytest.approx(_sf(4.0)) and inside < 0.05  # max(sf(6), sf(4))
    outside = tost_p(0.004, 0.002, 0.005)
    assert outside == pytest.approx(_sf(0.5)) and outside > 0.05  # max(sf(4.5), sf(0.5)) = 0.3085
    assert tost_p(0.0, 0.0, 0.005) == 0.0 and tost_p(0.01, 0.0, 0.005) == 1.0


def variants(**specs) -> dict[str, Variant]:
    base = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
            "bsc_ensembles": 4, "tasks": ["rerank"]}
    student = {"teacher": "t", "train": "tr", "heldout": "ho", "seeds": [1, 2], "device": "cpu", "lambda": 1.0}
    out = {}
    for name, spec in specs.items():
        spec = dict(spec)
        if "objective" in spec:
            spec["student"] = {**student, "objective": spec.pop("objective")}
        out[name] = Variant.checked({**base, **spec}, name)
    return out


def test_the_papers_pairs_put_oc_sft_against_every_trained_row_then_each_against_the_base():
    vs = variants(off_the_shelf={"label": "Off the shelf"}, so={"label": "Single-order", "objective": "single_order"},
                  oc={"label": "OC-SFT", "objective": "oc_sft"}, pa={"label": "PermAug", "objective": "perm_aug"})
    # OC-SFT's pairs in the paper's order (k10-SFT, permutation augmentation, DebiasFirst, k1-SFT).
    assert paper_pairs(vs, "off_the_shelf") == [("OC-SFT", "PermAug"), ("OC-SFT", "Single-order"),
                                                ("Single-order", "Off the shelf"), ("OC-SFT", "Off the shelf"),
                                                ("PermAug", "Off the shelf")]


def _metric_rows(variant, seed, metric, per_query, pert="random_shuffle"):
    rows = [("d1", "rerank", variant, seed, pert, q, metric, v) for q, v in per_query.items()]
    return rows + [("d1", "rerank", variant, seed, pert, None, metric, float(np.mean(list(per_query.values()))))]


def test_contrast_table_and_amortization_terms_on_hand_values():
    qs = [f"q{i}" for i in range(6)]
    rows = []
    for seed, shift in ((1, 0.1), (2, 0.3)):  # the trained row's anchor is the base's plus 0.1 or 0.3
        rows += _metric_rows("oc", seed, "ndcg10_shuffle_mean", {q: 0.4 + shift for q in qs})
        rows += _metric_rows("oc", seed, "tau_psi", {q: 0.2 for q in qs})
    rows += _metric_rows("off_the_shelf", None, "ndcg10_shuffle_mean", {q: 0.4 for q in qs})
    rows += _metric_rows("off_the_shelf", None, "ndcg10_order_averaged", {q: 0.55 for q in qs})
    rows += _metric_rows("off_the_shelf", None, "tau_psi", {q: 0.5 for q in qs})
    rows += _metric_rows("off_the_shelf", None, "ndcg@10", {q: 0.6 for q in qs}, pert="first_stage")
    rows += _metric_rows("oc", 1, "ndcg@10", {q: 0.7 for q in qs}, pert="first_stage")
    metrics = pl.DataFrame(rows, schema=SCHEMA, orient="row")
    vs = variants(off_the_shelf={"label": "Off the shelf"}, oc={"label": "OC-SFT", "objective": "oc_sft"})
    table = contrast_table(metrics, vs, "paper", "off_the_shelf", Settings(resamples=2000, seed=0))
    got = {(r["kind"], r["a"], r["column"]): r for r in table.iter_rows(named=True)}
    tau = got[("contrast", "OC-SFT", "rerank_tau_psi")]
    assert tau["b"] == "Off the shelf" and tau["difference"] == pytest.approx(-0.3) and tau["excludes_zero"]
    assert not tau["equivalent"] and tau["queries"] == 6 and (tau["seeds_a"], tau["seeds_b"]) == (2, 1)
    r = got[("amortization R", "Off the shelf", "rerank_ndcg10")]
    assert r["difference"] == pytest.approx(0.15)  # K = 10 order-averaged 0.55 - anchor 0.4
    i = got[("amortization I", "ceiling", "rerank_ndcg10")]
    assert i["difference"] == pytest.approx(0.7 - 0.55)  # the best first-stage quality of any row (OC-SFT's)
    rec = got[("amortization recovered", "OC-SFT", "rerank_ndcg10")]
    assert rec["difference"] == pytest.approx(0.2) and (rec["ci_low"], rec["ci_high"]) == pytest.approx((0.1, 0.3))
    declared = contrast_table(metrics, vs, "paper", "off_the_shelf", Settings(resamples=200), ceiling={"d1": 0.9})
    assert declared.filter(pl.col("kind") == "amortization I")["difference"][0] == pytest.approx(0.35)
    md = to_markdown(table, Settings(resamples=2000, seed=0))
    assert "| OC-SFT - Off the shelf | tau-PSI | -0.3000 |" in md and "| recovered | OC-SFT | nDCG@10 | +0.2000 |" in md
    with pytest.raises(ValueError, match="not Table 1 labels"):
        contrast_table(metrics, vs, [("OC-SFT", "Nope")], "off_the_shelf", Settings(resamples=200))
