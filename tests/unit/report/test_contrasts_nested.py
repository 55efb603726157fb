"""The contrasts' nested bootstrap (the paper's reducer, the default) and the crossed option, each
against a plain loop written here, on several training seeds x datasets x queries whose dataset
effects every seed shares (where the two designs differ); each seed's value and own interval, the
TOST 90% interval, the gate, the per-pair seeds and the config keys."""

from __future__ import annotations

import copy
from pathlib import Path
from statistics import NormalDist

import numpy as np
import polars as pl
import pytest
from config_errors import config_error

from presdep.config import SCHEMA_PATH, load_workflow_config, load_yaml, validate_config
from presdep.config.records import Variant
from presdep.contracts.errors import InvalidInput
from presdep.report.contrast_bootstrap import Side, paired_difference
from presdep.report.contrasts import Settings, contrast_table, paper_pairs, to_markdown

REPO = Path(__file__).resolve().parents[3]
SEEDS = (42, 43, 44)
SIZES = (20, 14, 25, 18, 20, 16)  # queries per dataset


def world(seed: int = 0, sizes=SIZES) -> tuple[Side, Side]:
    """b random; a = b + a dataset effect every seed shares (SD 0.028) + a small seed effect + query noise."""
    rng = np.random.default_rng(seed)
    dataset_effect = np.array([-0.03, 0.03, -0.01, 0.04, 0.0, -0.02])[: len(sizes)]
    seed_effect = rng.normal(0.0, 0.003, (len(SEEDS), 1))
    b = [rng.uniform(0.3, 0.7, (len(SEEDS), n)) for n in sizes]
    a = [x + e + seed_effect + rng.normal(0.0, 0.04, x.shape) for x, e in zip(b, dataset_effect)]
    return Side(a, SEEDS), Side(b, SEEDS)


def per_seed_lists(a: Side, b: Side) -> list[list[np.ndarray]]:
    """diff[s][d]: seed s's query differences in dataset d."""
    return [[x[s] - y[s] for x, y in zip(a.values, b.values)] for s in range(len(a.seeds))]


def nested_loop(diff: list[list[np.ndarray]], resamples: int, seed: int) -> np.ndarray:
    """The paper's rule one draw at a time, reading default_rng(seed) in the documented order: every
    draw's seeds, then every draw's datasets per chosen seed, then dataset by dataset the queries of
    each slot (draw, chosen seed, position) that holds it."""
    rng = np.random.default_rng(seed)
    n_seeds, n_sets = len(diff), len(diff[0])
    seeds = [rng.choice(n_seeds, size=n_seeds) for _ in range(resamples)]
    sets = [[rng.choice(n_sets, size=n_sets) for _ in range(n_seeds)] for _ in range(resamples)]
    slot = {}
    for d in range(n_sets):
        for r in range(resamples):
            for k in range(n_seeds):
                for j in range(n_sets):
                    if sets[r][k][j] == d:
                        queries = diff[seeds[r][k]][d]
                        slot[r, k, j] = np.mean(queries[rng.choice(len(queries), size=len(queries))])
    return np.array([np.mean([np.mean([slot[r, k, j] for j in range(n_sets)]) for k in range(n_seeds)])
                     for r in range(resamples)])


def nested_interleaved(diff: list[list[np.ndarray]], resamples: int, seed: int) -> np.ndarray:
    """The same rule with the random numbers read draw by draw (seeds, then each chosen seed's
    datasets, then each chosen dataset's queries): another stream, the same distribution."""
    rng = np.random.default_rng(seed)
    n_seeds, n_sets = len(diff), len(diff[0])
    out = []
    for _ in range(resamples):
        per_seed = []
        for s in rng.choice(n_seeds, size=n_seeds):
            means = []
            for d in rng.choice(n_sets, size=n_sets):
                queries = diff[s][d]
                means.append(np.mean(queries[rng.choice(len(queries), size=len(queries))]))
            per_seed.append(np.mean(means))
        out.append(np.mean(per_seed))
    return np.array(out)


def crossed_loop(a: Side, b: Side, resamples: int, seed: int) -> np.ndarray:
    """One dataset draw and one query draw per resample shared by every run of both sides (blocks of
    1,000 resamples: a block's datasets, then dataset by dataset its slots' queries), then the seeds,
    one draw for both sides (they have the same seeds)."""
    rng = np.random.default_rng(seed)
    runs = [[x[s] for x in a.values] for s in range(len(a.seeds))] + [[y[s] for y in b.values] for s in
                                                                       range(len(b.seeds))]
    n_sets, run_means = len(a.values), []
    for start in range(0, resamples, 1000):
        block = min(1000, resamples - start)
        sets = [rng.choice(n_sets, size=n_sets) for _ in range(block)]
        slot = {}
        for d in range(n_sets):
            for r in range(block):
                for j in range(n_sets):
                    if sets[r][j] == d:
                        n = len(runs[0][d])
                        queries = rng.choice(n, size=n)
                        slot[r, j] = [np.mean(run[d][queries]) for run in runs]
        run_means += [np.mean([slot[r, j] for j in range(n_sets)], axis=0) for r in range(block)]
    n = len(a.seeds)
    out = []
    for r in range(resamples):
        drawn = rng.choice(n, size=n)
        out.append(np.mean(run_means[r][:n][drawn]) - np.mean(run_means[r][n:][drawn]))
    return np.array(out)


def test_the_default_is_the_nested_bootstrap_and_equals_the_loop_of_the_papers_rule():
    a, b = world()
    d = paired_difference(a, b, resamples=1500, seed=7, margin=0.005)
    loop = nested_loop(per_seed_lists(a, b), 1500, 7)
    assert d.boot == pytest.approx(loop, abs=1e-12)
    assert d.estimate == pytest.approx(np.mean([np.mean([q.mean() for q in s]) for s in per_seed_lists(a, b)]))
    assert (d.low, d.high) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)
    assert d.se == pytest.approx(np.std(loop, ddof=1), abs=1e-12)


def test_the_crossed_option_equals_its_loop_and_its_se_is_larger_where_datasets_matter():
    a, b = world()
    crossed = paired_difference(a, b, resamples=2000, seed=7, margin=0.005, design="crossed")
    loop = crossed_loop(a, b, 2000, 7)
    assert crossed.boot == pytest.approx(loop, abs=1e-12)
    assert crossed.se == pytest.approx(np.std(loop, ddof=1), abs=1e-12)
    nested = paired_difference(a, b, resamples=2000, seed=7, margin=0.005)
    assert crossed.estimate == pytest.approx(nested.estimate)  # the same seeds: one estimate
    # the crossed design lets one dataset draw stand for every seed: its SE keeps the dataset
    # spread over 6 draws, the nested one averages it over 3 x 6 (here about 0.0118 against 0.0072)
    assert crossed.se / nested.se > 1.3


def test_the_nested_draws_agree_in_distribution_with_the_rule_read_draw_by_draw():
    a, b = world()
    d = paired_difference(a, b, resamples=3000, seed=11, margin=0.005)
    other = nested_interleaved(per_seed_lists(a, b), 3000, 12)
    assert d.se == pytest.approx(np.std(other, ddof=1), rel=0.08)
    low, high = np.percentile(other, [2.5, 97.5])
    assert abs(d.low - low) < 0.3 * d.se and abs(d.high - high) < 0.3 * d.se


def test_each_seed_has_its_value_and_its_own_interval_seeded_by_the_bootstrap_seed_plus_the_training_seed():
    a, b = world()
    d = paired_difference(a, b, resamples=500, seed=100, margin=0.005)
    diff = per_seed_lists(a, b)
    values = [np.mean([q.mean() for q in diff[s]]) for s in range(3)]
    assert [s.seed for s in d.per_seed] == list(SEEDS)
    assert [s.value for s in d.per_seed] == pytest.approx(values)
    for s, training in enumerate(SEEDS):
        alone = np.percentile(nested_loop([diff[s]], 500, 100 + training), [2.5, 97.5])
        assert (d.per_seed[s].low, d.per_seed[s].high) == pytest.approx(tuple(alone), abs=1e-12)
    assert d.seed_sd == pytest.approx(np.std(values, ddof=1))
    z = NormalDist().inv_cdf(0.95)
    assert d.tost_interval == pytest.approx((d.estimate - z * d.se, d.estimate + z * d.se))


def test_the_gate_names_a_small_difference_a_seed_sign_change_and_an_interval_over_zero():
    # seeds read +0.004, -0.002, +0.001 everywhere against an untrained row: small, signs change
    small = Side([np.array([[0.004] * 10, [-0.002] * 10, [0.001] * 10]) + 0.5] * 4, SEEDS)
    base = Side([np.full((1, 10), 0.5)] * 4, (None,))
    d = paired_difference(small, base, resamples=400, seed=0, margin=0.005)
    assert [s.value for s in d.per_seed] == pytest.approx([0.004, -0.002, 0.001])
    assert d.seed_sign_change and d.gate_reasons() == ["|difference| <= 0.01", "seed sign change",
                                                       "interval covers 0"]
    large = Side([np.array([[0.05] * 10, [0.06] * 10, [0.07] * 10]) + 0.5] * 4, SEEDS)
    assert paired_difference(large, base, resamples=400, seed=0, margin=0.005).gate_reasons() == []


def test_trained_rows_pair_on_their_shared_seeds_and_the_nested_design_refuses_rows_sharing_none():
    a, b = world(sizes=(12, 9, 15, 10))
    a2 = Side([x[[0, 2]] for x in a.values], (42, 44))
    d = paired_difference(a2, b, resamples=300, seed=3, margin=0.005)
    assert [s.seed for s in d.per_seed] == [42, 44]
    assert d.estimate == pytest.approx(np.mean([np.mean([(x[s] - y[s]).mean() for x, y in zip(a.values, b.values)])
                                                for s in (0, 2)]))
    apart = Side([x[[1]] for x in b.values], (43,)), Side([x[[0, 2]] for x in b.values], (42, 44))
    with pytest.raises(InvalidInput, match=r"share no training seed \(\[43\] against \[42, 44\]\).*crossed"):
        paired_difference(*apart, resamples=300, seed=3, margin=0.005)
    assert paired_difference(*apart, resamples=300, seed=3, margin=0.005, design="crossed").per_seed == ()


ROW = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
       "bsc_ensembles": 4, "tasks": ["rerank"]}
STUDENT = {"teacher": "t", "train": "tr", "heldout": "ho", "seeds": list(SEEDS), "device": "cpu", "lambda": 1.0}
VARIANTS = {"off_the_shelf": Variant.checked({**ROW, "label": "Off the shelf"}, "off_the_shelf"),
            "oc": Variant.checked({**ROW, "label": "OC-SFT", "student": {**STUDENT, "objective": "oc_sft"}}, "oc"),
            "so": Variant.checked({**ROW, "label": "Single-order", "student": {**STUDENT, "objective": "single_order"}},
                                  "so")}


def metric_rows(side: Side, variant: str, metric: str, perturbation: str) -> list[tuple]:
    # query ids zero-padded: the contrasts order a dataset's queries by id, as the arrays are
    return [(f"d{d}", "rerank", variant, seed, perturbation, f"q{q:02d}", metric, float(v))
            for d, x in enumerate(side.values) for s, seed in enumerate(side.seeds) for q, v in enumerate(x[s])]


def test_the_table_seeds_each_pair_from_pair_seeds_and_reports_the_seed_columns():
    a, b = world(sizes=(12, 9, 15, 10))
    untrained = Side([x[:1] for x in b.values], (None,))
    rows = (metric_rows(a, "oc", "ndcg@10", "first_stage") + metric_rows(b, "so", "ndcg@10", "first_stage")
            + metric_rows(a, "oc", "tau_psi", "random_shuffle") + metric_rows(b, "so", "tau_psi", "random_shuffle")
            + metric_rows(untrained, "off_the_shelf", "ndcg@10", "first_stage"))
    metrics = pl.DataFrame(rows, schema={"dataset": pl.String, "task": pl.String, "variant": pl.String,
                                         "seed": pl.Int64, "perturbation": pl.String, "query_id": pl.String,
                                         "metric": pl.String, "value": pl.Float64}, orient="row")
    settings = Settings(resamples=300, seed=5, pair_seeds={"quality": 100, "tau_psi": 200})
    table = contrast_table(metrics, VARIANTS, "paper", "off_the_shelf", settings)
    got = {(r["a"], r["b"], r["column"]): r for r in table.filter(pl.col("kind") == "contrast").iter_rows(named=True)}
    # the pairs: 0 OC-SFT - Single-order, 1 OC-SFT - Off the shelf, 2 Single-order - Off the shelf
    assert [got[k]["bootstrap_seed"] for k in [("OC-SFT", "Single-order", "rerank_ndcg10"),
                                               ("OC-SFT", "Single-order", "rerank_tau_psi"),
                                               ("OC-SFT", "Off the shelf", "rerank_ndcg10"),
                                               ("Single-order", "Off the shelf", "rerank_ndcg10")]] \
        == [100, 200, 101, 102]
    quality = got[("OC-SFT", "Single-order", "rerank_ndcg10")]
    loop = nested_loop(per_seed_lists(a, b), 300, 100)
    assert (quality["ci_low"], quality["ci_high"]) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)
    assert quality["se"] == pytest.approx(np.std(loop, ddof=1), abs=1e-12)
    values = [np.mean([q.mean() for q in s]) for s in per_seed_lists(a, b)]
    assert quality["seed_values"] == "; ".join(f"{s}: {v:+.6f}" for s, v in zip(SEEDS, values))
    assert quality["seed_sd"] == pytest.approx(np.std(values, ddof=1)) and quality["seed_intervals"].startswith("42: [")
    assert table.filter(pl.col("kind") == "amortization R").height == 0  # no anchor rows here
    crossed = contrast_table(metrics, VARIANTS, [("OC-SFT", "Single-order")], None,
                             Settings(resamples=300, seed=5, design="crossed"))
    first = crossed.filter(pl.col("column") == "rerank_ndcg10").row(0, named=True)
    assert first["bootstrap_seed"] == 5
    assert first["se"] == pytest.approx(np.std(crossed_loop(a, b, 300, 5), ddof=1), abs=1e-12)
    md = to_markdown(table, settings)
    assert "| 90% interval | seed SD | gate |" in md and "nested" in md
    assert f"| OC-SFT - Single-order | nDCG@10 (first-stage order) | 42: {values[0]:+.6f} [" in md


def test_the_config_chooses_the_design_and_the_per_pair_seeds():
    config = copy.deepcopy(load_yaml(REPO / "workflow_config.yaml"))
    default = Settings.from_config(validate_config(config, SCHEMA_PATH)["contrasts"])
    assert (default.design, dict(default.pair_seeds), default.seed_of("rerank_ndcg10", 3)) == ("nested", {}, 0)
    config["contrasts"] = {"design": "crosed"}
    assert "contrasts.design" in config_error(config)
    config["contrasts"] = {"pair_seeds": {"ndcg": 100}}
    assert "contrasts.pair_seeds" in config_error(config) and "ndcg" in config_error(config)
    paper = load_yaml(REPO / "configs" / "paper.yaml")["contrasts"]
    settings = Settings.from_config({**validate_config(config | {"contrasts": paper}, SCHEMA_PATH)["contrasts"]})
    assert paper["pairs"] == "paper" and settings.resamples == 10000
    variants = load_workflow_config(load_yaml(REPO / "configs" / "paper.yaml"), SCHEMA_PATH)[1].variants
    assert paper_pairs(variants, "off_the_shelf")[:4] == [
        ("OC-SFT", "Order-averaged"), ("OC-SFT", "Permutation augmentation"), ("OC-SFT", "DebiasFirst"),
        ("OC-SFT", "Single-order")]
    assert (settings.seed_of("rerank_ndcg10", 0), settings.seed_of("qa_tau_psi", 3)) == (100, 203)
