"""Rank(UB) and tiers: hand-computed cases, a brute-force recount of the intervals, and the
fields in the JSON, the SVG and the printed report."""

from __future__ import annotations

import argparse
import json

import numpy as np
import polars as pl
import pytest

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.errors import StabilityError
from presdep.contracts.schemas import write_table
from presdep.report.bootstrap import ClusterSums, bootstrap
from presdep.report.stability_analysis import paired_bootstrap
from presdep.report.stability_cli import register
from presdep.report.stability_io import analyse_reports, write_table1_stability
from presdep.report.stability_svg import render_stability_svg
from presdep.report.stability_tiers import (
    level_label,
    multiplicity_statement,
    rank_upper_bound,
    separability,
    separation_free_tiers,
    significantly_better,
)


def frame(runs: dict[str, np.ndarray]) -> pl.DataFrame:
    """One dataset, one run per variant: variant -> per-query values."""
    return pl.concat([
        pl.DataFrame({"dataset": "d", "variant": v, "seed": pl.Series([None] * len(x), dtype=pl.Int64),
                      "query_id": [f"q{i}" for i in range(len(x))], "value": np.asarray(x, dtype=float)})
        for v, x in runs.items()
    ])


def alternating(n: int, size: float) -> np.ndarray:
    """+size, -size, ...: a per-query deviation with mean exactly 0 that the bootstrap cannot tell from 0."""
    return np.where(np.arange(n) % 2 == 0, size, -size)


def four_rows(n: int = 100) -> pl.DataFrame:
    """A, C, D differ by constants on every query (0.1 and 0.8: always separable); B sits 0.05 from A
    and from C but with a +-1 per-query swing, so neither difference is separable (half-width about
    1.96 x 1/sqrt(100) = 0.2); B - D = 0.85 is."""
    x = np.random.default_rng(21).uniform(0.3, 0.7, n)
    return frame({"A": x + 0.40, "B": x + 0.35 + alternating(n, 1.0), "C": x + 0.30, "D": x - 0.50})


# --------------------------------------------------------------------------- the rules on arrays


def test_significance_needs_the_whole_interval_on_the_preferred_side():
    # interval[:, a, b] of mean_a - mean_b for rows 0, 1: [0.1, 0.3] (0 above 1), [-0.3, -0.1] (1 below 0).
    iv = np.array([[[0.0, 0.1], [-0.3, 0.0]], [[0.0, 0.3], [-0.1, 0.0]]])
    assert significantly_better(iv, lower_is_better=False).tolist() == [[False, True], [False, False]]
    assert significantly_better(iv, lower_is_better=True).tolist() == [[False, False], [True, False]]
    # An end touching 0, or off it by float noise only, does not separate.
    touch = np.array([[[0.0, 0.0], [-0.2, 0.0]], [[0.0, 0.2], [0.0, 0.0]]])
    noise = np.array([[[0.0, 1e-15], [-1e-15, 0.0]], [[0.0, 1e-15], [-1e-15, 0.0]]])
    for iv in (touch, noise):
        assert not significantly_better(iv, lower_is_better=False).any()
        assert not significantly_better(iv, lower_is_better=True).any()


def test_rank_upper_bound_and_separation_free_tiers_by_hand():
    # better[a, b]: a significantly better than b. Rows in point-estimate order 0, 1, 2, 3.
    # 0 beats 2 only; 2 beats nobody; 1 beats 3. Rank(UB): 0 -> 1, 1 -> 1, 2 -> 2, 3 -> 2.
    better = np.zeros((4, 4), dtype=bool)
    better[0, 2] = better[1, 3] = True
    assert rank_upper_bound(better).tolist() == [1, 1, 2, 2]
    # Tier 1 = {0, 1}; 2 is below 0, so it opens tier 2; 3 is not below 2, so it stays in tier 2
    # although it is inseparable from 0 (the rule keeps tiers contiguous).
    assert separation_free_tiers(better, [0, 1, 2, 3]).tolist() == [1, 1, 2, 2]
    # The walk follows the order given, not the row index: 3 and 2 share tier 1; 1 beats 3, a member,
    # so it opens tier 2 even though this order puts it below 3; 0 is separable from neither 1 nor 2.
    assert separation_free_tiers(better, [3, 2, 1, 0]).tolist() == [2, 2, 1, 1]
    assert separation_free_tiers(np.ones((3, 3), dtype=bool) & ~np.eye(3, dtype=bool), [2, 0, 1]).tolist() == [2, 3, 1]
    assert level_label(0.95) == "95%" and level_label(0.975) == "97.5%" and level_label(0.9) == "90%"


def test_separability_matches_a_brute_force_recount_at_any_level():
    rng = np.random.default_rng(7)
    n, v = 60, 4
    vals = rng.normal(0, 1, (n, v)) + np.array([0.0, 0.15, 0.3, 0.9])
    data = ClusterSums(n_runs=v, variant_runs=[np.array([i]) for i in range(v)],
                       sums=[vals], counts=[np.ones(n)])
    st = bootstrap(data, lower_is_better=False, resamples=1500, seed=3)
    for level in (0.5, 0.8, 0.95, 0.99):
        want = np.zeros((v, v), dtype=bool)
        for a in range(v):
            for b in range(v):
                tail = 100 * (1 - level) / 2
                lo, _ = np.percentile(st.boot[:, a] - st.boot[:, b], [tail, 100 - tail])
                want[a, b] = round(lo, 12) > 0
        assert (separability(st, lower_is_better=False, level=level) == want).all(), level
        # Lower is better: the same pairs, the other way round.
        assert (separability(st, lower_is_better=True, level=level) == want.T).all(), level
    # A lower level separates at least the pairs a higher one does.
    assert (separability(st, False, 0.99) <= separability(st, False, 0.5)).all()


# ------------------------------------------------------------------------------- the analysis


def test_two_clearly_separated_groups_give_two_tiers():
    n = 40
    x = np.random.default_rng(3).uniform(0.4, 0.6, n)
    f = frame({"a": x + 0.3, "b": x + 0.3 + alternating(n, 0.05), "c": x, "d": x + alternating(n, 0.05)})
    r = paired_bootstrap(f, lower_is_better=False, resamples=1000, seed=4401)
    assert r["tierLevel"] == 0.95 and r["multiplicity"].startswith("unadjusted: per-pair 95%")
    assert r["tiers"] == [["a", "b"], ["c", "d"]]
    assert r["tier"] == {"a": 1, "b": 1, "c": 2, "d": 2}
    assert r["rankUB"] == {"a": 1, "b": 1, "c": 3, "d": 3}  # 1 + the two rows of the top group
    assert r["pairwise"]["a"]["c"]["significantlyBetter"] and not r["pairwise"]["a"]["b"]["significantlyBetter"]
    assert not r["pairwise"]["c"]["a"]["significantlyBetter"]
    # Lower is better: the same groups, the other way up.
    low = paired_bootstrap(f, lower_is_better=True, resamples=1000, seed=4401)
    assert low["tiers"] == [["c", "d"], ["a", "b"]] and low["rankUB"] == {"c": 1, "d": 1, "a": 3, "b": 3}


def test_identical_rows_make_one_tier_with_rank_ub_one():
    x = np.random.default_rng(4).uniform(0, 1, 50)
    r = paired_bootstrap(frame({"a": x, "b": x.copy(), "c": x.copy()}), lower_is_better=False, resamples=800)
    assert r["tiers"] == [["a", "b", "c"]]
    assert r["rankUB"] == {"a": 1, "b": 1, "c": 1} and r["tier"] == {"a": 1, "b": 1, "c": 1}


def test_rank_ub_matches_a_hand_count_with_a_fixed_seed():
    r = paired_bootstrap(four_rows(), lower_is_better=False, resamples=2000, seed=4401)
    assert r["variants"] == ["A", "B", "C", "D"]
    # Hand count (four_rows): nobody beats A or B; A beats C; A, B and C beat D.
    assert r["rankUB"] == {"A": 1, "B": 1, "C": 2, "D": 4}
    # Walked from the best: B stays with A; C is below A and opens tier 2; D is below C.
    # B is inseparable from both A and C, which are separable: why the rule must be stated.
    assert r["tiers"] == [["A", "B"], ["C"], ["D"]]
    # The same count from the JSON's own 95% intervals.
    for b in r["variants"]:
        beaten_by = [a for a in r["variants"] if a != b and r["pairwise"][a][b]["differenceInterval95"][0] > 1e-12]
        assert r["rankUB"][b] == 1 + len(beaten_by)
        assert all(r["pairwise"][a][b]["significantlyBetter"] == (a in beaten_by) for a in r["variants"] if a != b)


def test_the_level_is_stated_and_checked():
    # Level 0.3: B's interval to A is about 0.05 +- 0.04, so A separates from B and B from C.
    r = paired_bootstrap(four_rows(), lower_is_better=False, resamples=2000, seed=4401, level=0.3)
    assert r["tierLevel"] == 0.3 and "per-pair 30% paired-bootstrap intervals" in r["multiplicity"]
    assert r["rankUB"] == {"A": 1, "B": 2, "C": 3, "D": 4} and r["tiers"] == [["A"], ["B"], ["C"], ["D"]]
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(StabilityError, match="tier level must lie strictly between 0 and 1"):
            paired_bootstrap(four_rows(), lower_is_better=False, resamples=10, level=bad)


# ------------------------------------------------------------------ JSON, SVG and printed report


def _metrics(n: int = 35) -> pl.DataFrame:
    """rerank_ndcg10 per-query rows: 'top' 0.3 above 'mid', which equals 'twin' on every query."""
    spec = TABLE1_COLUMNS["rerank_ndcg10"]
    x = np.random.default_rng(8).uniform(0.2, 0.6, n)
    rows = [{"dataset": "d", "task": spec.task, "variant": v, "seed": None, "perturbation": spec.perturbation,
             "query_id": f"q{i}", "metric": spec.metric, "value": float(val)}
            for v, vals in {"top": x + 0.3, "mid": x, "twin": x.copy()}.items() for i, val in enumerate(vals)]
    return pl.DataFrame(rows, schema_overrides={"seed": pl.Int32})


def test_table1_json_and_svg_carry_the_tiers(tmp_path):
    path = write_table(_metrics(), tmp_path / "m.parquet", "metrics")
    res = write_table1_stability([path], tmp_path / "t.json", tmp_path / "svg", resamples=500, seed=4)
    col = json.loads((tmp_path / "t.json").read_text())["columns"]["rerank_ndcg10"]
    assert col == json.loads(json.dumps(res["columns"]["rerank_ndcg10"]))
    assert col["tierLevel"] == 0.95 and col["tiers"] == [["top"], ["mid", "twin"]]
    statement = multiplicity_statement(0.95, 3)
    assert col["multiplicity"] == statement and "unadjusted" in statement and "3 pairs of 3 rows" in statement
    assert col["rankUB"] == {"top": 1, "mid": 2, "twin": 2} and col["tier"] == {"top": 1, "mid": 2, "twin": 2}
    svg = (tmp_path / "svg" / "rerank_ndcg10.svg").read_text()
    assert "2 tier(s) at 95% (bands, brackets)" in svg and "tier (no pair separable at 95%)" in svg
    # The heading says the intervals are unadjusted (the JSON statement's first clause).
    assert "Rank(UB), tiers: unadjusted: per-pair 95% paired-bootstrap intervals, no correction across the " \
           "3 pairs of 3 rows<" in svg
    # The side table's rows end in Rank(UB) and tier.
    assert "  1    1<" in svg and "  2    2<" in svg


def test_svg_draws_a_bracket_per_tier():
    x = np.random.default_rng(9).uniform(0, 1, 40)
    one = paired_bootstrap(frame({"a": x, "b": x.copy()}), lower_is_better=False, resamples=200)
    three = paired_bootstrap(frame({"a": x + 2, "b": x + 1, "c": x}), lower_is_better=False, resamples=200)
    assert len(three["tiers"]) == 3 and len(one["tiers"]) == 1
    # A tier adds a bracket path and, from the second on, a dashed separator line.
    count = render_stability_svg(three).count("<path") - render_stability_svg(one).count("<path")
    assert count >= 2 * 2, count


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="presdep")
    register(p.add_subparsers(dest="command", required=True))
    return p


def test_cli_prints_rank_ub_and_tiers_and_takes_a_level(tmp_path, capsys):
    path = write_table(_metrics(), tmp_path / "m.parquet", "metrics")
    args = parser().parse_args(["stability", str(path), "--column", "rerank_ndcg10", "--resamples", "500",
                                "--json", str(tmp_path / "o.json")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "Rank(UB)  tier" in out
    assert "tiers at 95% (no row significantly better than another of its tier): 1: top | 2: mid, twin" in out
    # 3 pairs at 95%: Bonferroni's family-wise level is 1 - 0.05 / 3.
    assert ("Rank(UB) and tiers: unadjusted: per-pair 95% paired-bootstrap intervals, no correction across the "
            "3 pairs of 3 rows; family-wise (Bonferroni) would need level 0.983333") in out
    top = next(ln for ln in out.splitlines() if ln.startswith("top "))
    assert top.split()[-2:] == ["1", "1"]
    twin = next(ln for ln in out.splitlines() if ln.startswith("twin "))
    assert twin.split()[-2:] == ["2", "2"]
    args = parser().parse_args(["stability", str(path), "--column", "rerank_ndcg10", "--resamples", "500",
                                "--level", "0.9", "--json", str(tmp_path / "o.json")])
    assert args.func(args) == 0
    assert "tiers at 90%" in capsys.readouterr().out
    col = json.loads((tmp_path / "o.json").read_text())["columns"]["rerank_ndcg10"]
    assert col["tierLevel"] == 0.9 and col["multiplicity"].startswith("unadjusted: per-pair 90%")
    args = parser().parse_args(["stability", str(path), "--column", "rerank_ndcg10", "--level", "95"])
    assert args.func(args) == 2
    assert "tier level must lie strictly between 0 and 1, got 95" in capsys.readouterr().err


def test_report_input_carries_the_tiers(tmp_path):
    paths = []
    for model, score in {"good": 1.0, "also-good": 1.0, "bad": 0.0}.items():
        p = tmp_path / f"{model}.json"
        p.write_text(json.dumps({"model": model, "tasks": [{"id": f"t{i}", "score": score} for i in range(30)]}))
        paths.append(p)
    r = analyse_reports(paths, resamples=300, seed=1, level=0.99)
    assert r["tierLevel"] == 0.99 and r["tiers"] == [["also-good", "good"], ["bad"]]
    assert r["multiplicity"] == multiplicity_statement(0.99, 3)
    assert r["rankUB"] == {"also-good": 1, "good": 1, "bad": 3}
