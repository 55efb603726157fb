"""Paired bootstrap rank intervals: checked against exact enumeration, normal theory and scipy."""

from __future__ import annotations

import argparse
import itertools
import json
import xml.etree.ElementTree as ET

import numpy as np
import polars as pl
import pytest
from scipy.stats import kendalltau

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.errors import StabilityError
from presdep.contracts.json_artifacts import DIGEST_FIELD
from presdep.contracts.schemas import write_table
from presdep.report.bootstrap import kendall_tau_b
from presdep.report.rank_sensitivity import presentation_sensitivity
from presdep.report.stability_analysis import analyse_table1, paired_bootstrap
from presdep.report.stability_cli import register
from presdep.report.stability_io import read_stability_json, write_table1_stability
from presdep.report.stability_svg import HEIGHT_PX, WIDTH_PX, render_stability_svg


def frame(runs: dict, dataset: str = "d", prefix: str = "q") -> pl.DataFrame:
    """runs: variant -> values, or variant -> {seed: values}."""
    parts = []
    for variant, spec in runs.items():
        seeds = spec if isinstance(spec, dict) else {None: spec}
        for seed, vals in seeds.items():
            vals = np.asarray(vals, dtype=float)
            parts.append(pl.DataFrame({
                "dataset": [dataset] * vals.size, "variant": [variant] * vals.size,
                "seed": pl.Series([seed] * vals.size, dtype=pl.Int64),
                "query_id": [f"{prefix}{i}" for i in range(vals.size)], "value": vals,
            }))
    return pl.concat(parts)


def test_dominant_variant_is_always_first():
    rng = np.random.default_rng(1)
    f = frame({"a": rng.uniform(0.8, 0.9, 50), "b": rng.uniform(0.1, 0.6, 50), "c": rng.uniform(0.1, 0.6, 50)})
    r = paired_bootstrap(f, lower_is_better=False, resamples=600, seed=3)
    assert r["probabilityFirst"]["a"] == 1.0
    assert r["rankInterval95"]["a"] == [1.0, 1.0]
    assert r["rankDistribution"]["a"] == {"1": 1.0}
    assert r["variants"][0] == "a"
    assert r["pairwise"]["a"]["b"]["probabilityBetter"] == 1.0
    assert r["pairwise"]["b"]["a"]["probabilityBetter"] == 0.0
    # Probabilities of ranking first form a distribution.
    assert sum(r["probabilityFirst"].values()) == pytest.approx(1.0)


def test_lower_is_better_ranks_ascending():
    rng = np.random.default_rng(2)
    base = rng.normal(0, 0.01, 60)
    f = frame({"low": 0.1 + base, "mid": 0.3 + base, "high": 0.5 + base})
    r = paired_bootstrap(f, lower_is_better=True, resamples=500)
    assert r["variants"] == ["low", "mid", "high"]
    assert r["rank"] == {"low": 1.0, "mid": 2.0, "high": 3.0}
    assert r["probabilityFirst"]["low"] == 1.0
    up = paired_bootstrap(f, lower_is_better=False, resamples=500)
    assert up["variants"] == ["high", "mid", "low"]
    assert up["pairwise"]["high"]["low"]["difference"] == pytest.approx(0.4)


def test_identical_variants_split_first_and_tau_b_handles_the_tie():
    rng = np.random.default_rng(3)
    x = rng.uniform(0.4, 0.9, 40)
    f = frame({"a": x, "b": x.copy(), "c": x - 0.3})
    r = paired_bootstrap(f, lower_is_better=False, resamples=500)
    assert r["probabilityFirst"] == {"a": 0.5, "b": 0.5, "c": 0.0}
    assert r["rankInterval95"]["a"] == [1.5, 1.5]
    assert r["rank"]["a"] == r["rank"]["b"] == 1.5
    assert r["pairwise"]["a"]["b"]["probabilityBetter"] == 0.5
    # The tied pair is tied in every resample: tau-b is 1 (tau-a would be 2/3).
    assert r["meanKendallTau"] == pytest.approx(1.0)
    assert kendalltau([1.5, 1.5, 3], [1.5, 1.5, 3]).statistic == pytest.approx(1.0)
    # Only two identical variants: tau-b is undefined, said so, not a crash.
    r2 = paired_bootstrap(frame({"a": x, "b": x.copy()}), lower_is_better=False, resamples=500)
    assert r2["meanKendallTau"] is None
    assert any("tau-b undefined" in w for w in r2["warnings"])


def test_kendall_tau_b_matches_scipy_with_ties():
    rng = np.random.default_rng(4)
    ref = rng.integers(0, 4, 7).astype(float)
    others = rng.integers(0, 4, (50, 7)).astype(float)
    got = kendall_tau_b(ref, others)
    for row, g in zip(others, got):
        want = kendalltau(ref, row).statistic
        if np.isnan(want):
            assert np.isnan(g)
        else:
            assert g == pytest.approx(want)


def test_matches_exact_enumeration_of_all_resamples():
    # 3 queries: all 27 index tuples are equally likely; compare with the sampled bootstrap.
    a = np.array([1.0, 0.0, 0.5])
    b = np.array([0.0, 1.0, 0.5])
    c = np.array([0.3, 0.3, 0.9])
    vals = np.stack([a, b, c], axis=1)
    first = np.zeros(3)
    a_beats_b = 0.0
    for idx in itertools.product(range(3), repeat=3):
        m = np.round(vals[list(idx)].mean(axis=0), 12)
        best = m == m.max()
        first += best / best.sum()
        a_beats_b += (m[0] > m[1]) + 0.5 * (m[0] == m[1])
    first /= 27
    a_beats_b /= 27
    r = paired_bootstrap(frame({"a": a, "b": b, "c": c}), lower_is_better=False, resamples=20000, seed=9)
    for i, v in enumerate("abc"):
        assert r["probabilityFirst"][v] == pytest.approx(first[i], abs=0.015)
    assert r["pairwise"]["a"]["b"]["probabilityBetter"] == pytest.approx(a_beats_b, abs=0.015)
    assert r["mean"]["c"] == pytest.approx(0.5)


def test_same_seed_same_output_and_seed_matters():
    rng = np.random.default_rng(5)
    f = frame({"a": rng.uniform(size=40), "b": rng.uniform(size=40), "c": rng.uniform(size=40)})
    r1 = paired_bootstrap(f, lower_is_better=False, resamples=700, seed=11)
    r2 = paired_bootstrap(f, lower_is_better=False, resamples=700, seed=11)
    r3 = paired_bootstrap(f, lower_is_better=False, resamples=700, seed=12)
    assert json.dumps(r1) == json.dumps(r2)
    assert r1["meanInterval95"] != r3["meanInterval95"]
    assert r1["seed"] == 11 and r1["resamples"] == 700


def test_interval_of_mean_matches_normal_theory():
    rng = np.random.default_rng(6)
    n = 2000
    x = rng.normal(0.5, 0.2, n)
    f = frame({"a": x, "b": x + rng.normal(0, 0.05, n)})
    r = paired_bootstrap(f, lower_is_better=False, resamples=2000)
    half = 1.96 * x.std(ddof=1) / np.sqrt(n)
    lo, hi = r["meanInterval95"]["a"]
    assert r["mean"]["a"] == pytest.approx(x.mean())
    assert (x.mean() - lo) == pytest.approx(half, rel=0.10)
    assert (hi - x.mean()) == pytest.approx(half, rel=0.10)


def test_clusters_resample_together():
    # 100 items with 4 perfectly correlated variants each: per-cluster resampling
    # sees 100 independent units, per-item resampling wrongly sees 400.
    rng = np.random.default_rng(7)
    base = rng.normal(0, 1, 100)
    vals = np.repeat(base, 4)
    ids = [f"t{i}-v{k}" for i in range(100) for k in range(1, 5)]
    rows = pl.DataFrame({"dataset": "d", "variant": "a", "seed": pl.Series([None] * 400, dtype=pl.Int64),
                         "query_id": ids, "cluster": [i.rsplit("-v", 1)[0] for i in ids], "value": vals})
    other = rows.with_columns(pl.lit("b").alias("variant"), pl.col("value") * 0.5)
    clustered = pl.concat([rows, other])
    per_item = clustered.drop("cluster")
    sd = base.std(ddof=1)
    wc = np.diff(paired_bootstrap(clustered, lower_is_better=False, resamples=2000)["meanInterval95"]["a"])[0]
    wi = np.diff(paired_bootstrap(per_item, lower_is_better=False, resamples=2000)["meanInterval95"]["a"])[0]
    assert wc == pytest.approx(2 * 1.96 * sd / np.sqrt(100), rel=0.15)
    assert wi == pytest.approx(2 * 1.96 * vals.std() / np.sqrt(400), rel=0.15)
    assert wc / wi == pytest.approx(2.0, rel=0.2)


def test_hierarchical_resampling_gives_equal_dataset_weight():
    # x wins every query of the small dataset, y every query of the large one.
    small = frame({"x": np.ones(10), "y": np.zeros(10)}, dataset="small")
    large = frame({"x": np.zeros(1000), "y": np.ones(1000)}, dataset="large", prefix="p")
    r = paired_bootstrap(pl.concat([small, large]), lower_is_better=False, resamples=4000, seed=1)
    # Equal weight: 0.5, not the pooled 10/1010.
    assert r["mean"]["x"] == pytest.approx(0.5)
    assert r["sharedItemsPerDataset"] == {"large": 1000, "small": 10}
    # Datasets drawn with replacement: (small, small), mixed, (large, large) with 1/4, 1/2, 1/4.
    dist = r["rankDistribution"]["x"]
    assert dist["1"] == pytest.approx(0.25, abs=0.03)
    assert dist["1.5"] == pytest.approx(0.5, abs=0.03)
    assert dist["2"] == pytest.approx(0.25, abs=0.03)
    assert r["meanInterval95"]["x"] == [0.0, 1.0]
    assert r["pairwise"]["x"]["y"]["probabilityBetter"] == pytest.approx(0.5, abs=0.03)


def test_one_seed_drawn_per_variant_and_resample():
    rng = np.random.default_rng(8)
    q = rng.normal(0, 1e-4, 200)
    f = frame({"trained": {0: 0.4 + q, 1: 0.5 + q, 2: 0.6 + q}, "base": 0.5 + q + 1e-3})
    r = paired_bootstrap(f, lower_is_better=False, resamples=3000)
    assert r["runsPerVariant"] == {"trained": 3, "base": 1}
    assert r["mean"]["trained"] == pytest.approx(0.5, abs=1e-4)
    lo, hi = r["meanInterval95"]["trained"]
    # Seed variation dominates: the interval spans the seeds' means.
    assert lo == pytest.approx(0.4, abs=1e-3) and hi == pytest.approx(0.6, abs=1e-3)
    # "trained" beats "base" exactly when seed 2 is drawn.
    assert r["pairwise"]["trained"]["base"]["probabilityBetter"] == pytest.approx(1 / 3, abs=0.03)
    assert not any("one run per variant" in w for w in r["warnings"])


def test_warnings_and_dropped_queries():
    rng = np.random.default_rng(9)
    f = frame({"a": rng.uniform(size=20), "b": rng.uniform(size=25)})  # b has 5 extra queries
    r = paired_bootstrap(f, lower_is_better=False, resamples=100)
    assert r["sharedItems"] == 20 and r["droppedItems"] == 5
    text = " ".join(r["warnings"])
    assert "only 20 shared items" in text
    assert "one run per variant" in text
    assert "only 100 resamples" in text
    assert "5 quer(ies) not shared" in text
    # A dataset that one variant lacks entirely leaves with a warning.
    two = pl.concat([frame({"a": rng.uniform(size=40), "b": rng.uniform(size=40)}),
                     frame({"a": rng.uniform(size=40)}, dataset="only_a")])
    r2 = paired_bootstrap(two, lower_is_better=False, resamples=500)
    assert r2["datasets"] == ["d"] and r2["droppedItems"] == 40
    assert any("['only_a']" in w for w in r2["warnings"])
    quiet = paired_bootstrap(frame({"a": {0: rng.uniform(size=40), 1: rng.uniform(size=40)},
                                    "b": rng.uniform(size=40)}), lower_is_better=False, resamples=500)
    assert quiet["warnings"] == []


def test_all_null_variant_leaves_the_column_with_a_warning():
    rng = np.random.default_rng(10)
    f = frame({"a": rng.uniform(size=40), "b": rng.uniform(size=40)})
    f = pl.concat([f, frame({"graded": np.zeros(40)}).with_columns(pl.lit(None, pl.Float64).alias("value"))])
    r = paired_bootstrap(f, lower_is_better=True, resamples=500)
    assert sorted(r["variants"]) == ["a", "b"] and r["sharedItems"] == 40
    assert any("graded" in w for w in r["warnings"])


def test_bad_input_is_named():
    f = frame({"a": [0.1, 0.2]})
    with pytest.raises(StabilityError, match="duplicate per-query row"):
        paired_bootstrap(pl.concat([f, f]), lower_is_better=False)
    with pytest.raises(StabilityError, match=r"lacks column\(s\) \['value'\]"):
        paired_bootstrap(f.drop("value"), lower_is_better=False)
    with pytest.raises(StabilityError, match="no query is shared"):
        paired_bootstrap(pl.concat([frame({"a": [0.1]}), frame({"b": [0.2]}, prefix="z")]), lower_is_better=False)


def test_presentation_sensitivity_ranks_each_presentation():
    rows = []
    # a is best under presentation 0 and worst under 1; b is second in both.
    means = {0: {"a": 0.9, "b": 0.5, "c": 0.1}, 1: {"a": 0.1, "b": 0.5, "c": 0.9}}
    for p, per in means.items():
        for v, m in per.items():
            for q in range(5):
                rows.append({"variant": v, "seed": None, "query_id": f"q{q}", "presentation": p, "value": m})
    pp = pl.DataFrame(rows, schema_overrides={"seed": pl.Int64})
    s = presentation_sensitivity(pp, lower_is_better=False)
    assert s["rankRange"] == {"a": [1.0, 3.0], "b": [2.0, 2.0], "c": [1.0, 3.0]}
    assert s["rankSpread"]["b"] == 0.0 and s["ranks"]["a"] == {"0": 1.0, "1": 3.0}
    f = frame({v: np.full(40, 0.5) + i * 0.1 for i, v in enumerate("abc")})
    r = paired_bootstrap(f, lower_is_better=False, resamples=500, per_presentation=pp)
    assert r["presentationSensitivity"]["rankRange"]["a"] == [1.0, 3.0]
    assert r["presentationSensitivityReason"] is None
    r0 = paired_bootstrap(f, lower_is_better=False, resamples=500)
    assert r0["presentationSensitivity"] is None and "per-presentation" in r0["presentationSensitivityReason"]


def metrics_frame(rng, columns=("rerank_ndcg10", "rerank_tau_psi"), n=35) -> pl.DataFrame:
    rows = []
    for col in columns:
        spec = TABLE1_COLUMNS[col]
        for v, seeds in (("Off the shelf", [None]), ("OC-SFT", [0, 1, 2])):
            for s in seeds:
                for q in range(n):
                    rows.append({"dataset": "syn", "task": spec.task, "variant": v, "seed": s,
                                 "perturbation": spec.perturbation, "query_id": f"q{q}",
                                 "metric": spec.metric, "value": float(rng.uniform())})
                rows.append({"dataset": "syn", "task": spec.task, "variant": v, "seed": s,
                             "perturbation": spec.perturbation, "query_id": None,
                             "metric": spec.metric, "value": 0.5})  # aggregate row: ignored
    return pl.DataFrame(rows, schema_overrides={"seed": pl.Int32})


def test_table1_json_and_svgs(tmp_path):
    rng = np.random.default_rng(11)
    path = write_table(metrics_frame(rng), tmp_path / "m.parquet", "metrics")
    result = write_table1_stability([path], tmp_path / "out" / "table1.json", tmp_path / "svg", resamples=500, seed=4)
    raw = json.loads((tmp_path / "out" / "table1.json").read_text())
    data = read_stability_json(tmp_path / "out" / "table1.json")  # verified against its digest
    assert data == json.loads(json.dumps(result)) and raw == {**data, DIGEST_FIELD: raw[DIGEST_FIELD]}
    assert set(data["columns"]) == {"rerank_ndcg10", "rerank_tau_psi"}
    assert set(data["skipped"]) == set(TABLE1_COLUMNS) - {"rerank_ndcg10", "rerank_tau_psi"}
    col = data["columns"]["rerank_tau_psi"]
    assert col["direction"] == "lower" and col["sharedItems"] == 35
    for key in ("meanKendallTau", "probabilityFirst", "rankInterval95", "mean", "meanInterval95", "pairwise",
                "presentationSensitivity", "warnings", "sharedItems", "resamples", "seed"):
        assert key in col
    assert col["runsPerVariant"] == {"OC-SFT": 3, "Off the shelf": 1}
    for column in data["columns"]:
        root = ET.parse(tmp_path / "svg" / f"{column}.svg").getroot()
        assert root.get("width") == f"{WIDTH_PX}px" and root.get("height") == f"{HEIGHT_PX}px"
        text = (tmp_path / "svg" / f"{column}.svg").read_text()
        assert column in text and "rank (1 = best)" in text and "variant" in text


def test_svg_is_deterministic():
    rng = np.random.default_rng(12)
    r = paired_bootstrap(frame({"a": rng.uniform(size=30), "b": rng.uniform(size=30)}),
                         lower_is_better=False, resamples=500)
    assert render_stability_svg(r) == render_stability_svg(r)


def parser():
    p = argparse.ArgumentParser(prog="presdep")
    register(p.add_subparsers(dest="command", required=True))
    return p


def test_cli_stability_and_export(tmp_path, capsys):
    rng = np.random.default_rng(13)
    m = write_table(metrics_frame(rng), tmp_path / "m.parquet", "metrics")
    args = parser().parse_args(["stability", str(m), "--column", "rerank_tau_psi", "--seed", "7",
                                "--resamples", "500", "--svg", str(tmp_path / "o.svg"),
                                "--json", str(tmp_path / "o.json")])
    assert args.func(args) == 0
    out = json.loads((tmp_path / "o.json").read_text())["columns"]["rerank_tau_psi"]
    assert out["seed"] == 7 and out["resamples"] == 500
    assert "OC-SFT" in capsys.readouterr().out
    assert ET.parse(tmp_path / "o.svg").getroot().get("width") == "1200px"
    # Several columns with data and none chosen: a clear error, exit 2.
    args = parser().parse_args(["stability", str(m)])
    assert args.func(args) == 2
    assert "choose a column" in capsys.readouterr().err
    args = parser().parse_args(["stability", str(m), "--column", "rerank_ndcg10", "--lower-is-better"])
    assert args.func(args) == 2
    # Export, then bootstrap the reports: same means as from the Parquet file.
    args = parser().parse_args(["export-report", str(m), "--column", "rerank_tau_psi", "--out", str(tmp_path / "rep")])
    assert args.func(args) == 0
    reports = sorted(str(p) for p in (tmp_path / "rep").glob("*.json"))
    assert len(reports) == 4
    args = parser().parse_args(["stability", *reports, "--resamples", "500", "--seed", "7",
                                "--json", str(tmp_path / "r.json")])
    assert args.func(args) == 0
    back = json.loads((tmp_path / "r.json").read_text())["columns"]["report"]
    assert back["direction"] == "lower"  # taken from the exported reports
    assert back["mean"] == pytest.approx(out["mean"])
    for v, iv in out["meanInterval95"].items():  # same data, same seed: the same resamples
        assert back["meanInterval95"][v] == pytest.approx(iv)


def test_analyse_table1_rejects_unknown_column():
    with pytest.raises(StabilityError, match="unknown Table 1 column"):
        analyse_table1(metrics_frame(np.random.default_rng(0)), columns=["nope"])


def test_snakemake_script_adapter(tmp_path):
    import logging
    import runpy
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    rng = np.random.default_rng(14)
    m = write_table(metrics_frame(rng, columns=("resp_pair_flip",)), tmp_path / "m.parquet", "metrics")
    smk = SimpleNamespace(
        input=SimpleNamespace(metrics=[str(m)]),
        output=SimpleNamespace(json=str(tmp_path / "table1.json"), svg_dir=str(tmp_path / "svg")),
        params=SimpleNamespace(resamples=500, seed=4401, labels={}, shared_permutations=["d"]),
        log=[str(tmp_path / "stability.log")],
    )
    script = Path(__file__).resolve().parents[3] / "scripts" / "stability.py"
    saved = sys.stderr
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        runpy.run_path(str(script), init_globals={"snakemake": smk})
    finally:
        root.handlers[:] = handlers  # the adapter's log_to_file set up logging for a whole job
        root.setLevel(level)
        if sys.stderr is not saved:
            sys.stderr.close()
        sys.stderr = saved
    data = json.loads((tmp_path / "table1.json").read_text())
    assert list(data["columns"]) == ["resp_pair_flip"]
    assert (tmp_path / "svg" / "resp_pair_flip.svg").is_file()
    assert "rerank_ndcg10: skipped" in (tmp_path / "stability.log").read_text()
    # the rule's shared-permutation datasets reach each column's warnings and the log
    assert "conditional on those permutations" in (tmp_path / "stability.log").read_text()


# --------------------------------------------- JSON run reports with -vN paraphrase ids


def _write_reports(tmp_path, scores: dict[str, list[dict[str, float]]]) -> list[str]:
    """scores: model -> one {task id: score} dict per repeated run."""
    paths = []
    for model, runs in scores.items():
        for k, run in enumerate(runs):
            p = tmp_path / f"{model}-{k}.json"
            p.write_text(json.dumps({"model": model, "seed": k, "summary": {"note": "ignored"},
                                     "tasks": [{"id": i, "score": s} for i, s in run.items()]}))
            paths.append(str(p))
    return paths


def test_report_input_counts_items_once_and_ranks_each_prompt_variant(tmp_path):
    from presdep.report.stability_io import analyse_reports

    rng = np.random.default_rng(21)
    ids = [f"t{i}-v{k}" for i in range(20) for k in (1, 2)]
    # A is better on v1, B on v2 (by construction): the rank range of each spans 1..2.
    a = [{i: float(rng.uniform(0.6, 1.0) if i.endswith("v1") else rng.uniform(0.0, 0.4)) for i in ids} for _ in range(2)]
    b = [{i: float(rng.uniform(0.0, 0.4) if i.endswith("v1") else rng.uniform(0.6, 1.0)) for i in ids}]
    c = [{i: 0.5 for i in ids}]
    res = analyse_reports(_write_reports(tmp_path, {"A": a, "B": b, "C": c}), resamples=300, seed=3)
    assert res["sharedItems"] == 20 and res["sharedClusters"] == 20  # the convention: items, variants once
    assert res["sharedRows"] == 40 and res["sharedItemsPerDataset"] == {"report": 20}
    assert res["sharedRowsPerDataset"] == {"report": 40}
    assert any("only 20 shared items" in w for w in res["warnings"])  # the warning counts items too
    ps = res["promptSensitivity"]
    assert res["promptSensitivityReason"] is None
    assert ps["promptVariants"] == ["v1", "v2"] and ps["sharedItems"] == {"v1": 20, "v2": 20}
    # Hand-made oracle: per variant, mean over runs of each run's mean.
    oracle = {
        "A": {v: np.mean([np.mean([s for i, s in r.items() if i.endswith(v)]) for r in a]) for v in ("v1", "v2")},
        "B": {v: np.mean([s for i, s in b[0].items() if i.endswith(v)]) for v in ("v1", "v2")},
        "C": {"v1": 0.5, "v2": 0.5},
    }
    for m in oracle:
        assert ps["mean"][m] == pytest.approx(oracle[m])
    assert ps["ranking"] == {"v1": ["A", "C", "B"], "v2": ["B", "C", "A"]}
    assert ps["ranks"]["A"] == {"v1": 1.0, "v2": 3.0} and ps["ranks"]["C"] == {"v1": 2.0, "v2": 2.0}
    assert ps["rankRange"] == {"A": [1.0, 3.0], "B": [1.0, 3.0], "C": [2.0, 2.0]}
    assert ps["rankSpread"] == {"A": 2.0, "B": 2.0, "C": 0.0}


def test_report_input_without_variant_suffixes_says_why(tmp_path):
    from presdep.report.stability_analysis import NO_PROMPT_VARIANT_REASON
    from presdep.report.stability_io import analyse_reports

    runs = {"A": [{f"q{i}": 0.9 for i in range(5)}], "B": [{f"q{i}": 0.1 for i in range(5)}]}
    res = analyse_reports(_write_reports(tmp_path, runs), resamples=50)
    assert res["promptSensitivity"] is None and res["promptSensitivityReason"] == NO_PROMPT_VARIANT_REASON
    assert res["sharedItems"] == 5 == res["sharedRows"]


def test_metrics_input_has_no_prompt_variants():
    r = paired_bootstrap(frame({"a": [0.1, 0.2, 0.3], "b": [0.3, 0.2, 0.1]}), lower_is_better=False, resamples=20)
    assert r["promptSensitivity"] is None and "prompt-variant" in r["promptSensitivityReason"]


def test_the_svg_names_variants_by_their_table1_labels(tmp_path):
    rng = np.random.default_rng(13)
    r = paired_bootstrap(frame({"off_the_shelf": rng.uniform(size=30), "bsc": rng.uniform(size=30)}),
                         lower_is_better=False, resamples=200)
    text = render_stability_svg(r, labels={"off_the_shelf": "Off the shelf", "bsc": "BSC (x2)"})
    assert "Off the shelf" in text and "BSC (x2)" in text
    assert ">off_the_shelf<" not in text  # the tick labels are the labels, not the keys
