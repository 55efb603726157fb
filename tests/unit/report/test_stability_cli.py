"""The pairwise block of ``presdep stability``'s printed summary, read back against its JSON."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import polars as pl
import pytest

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.contracts.schemas import write_table
from presdep.report.stability_analysis import paired_bootstrap
from presdep.report.stability_cli import _summary, register

PAIR_LINE = re.compile(
    r"^(?P<pair>.+?)\s+(?P<diff>[+-]\d+\.\d{4})\s+\[\s*(?P<lo>[+-]\d+\.\d{4}),\s+(?P<hi>[+-]\d+\.\d{4})\]\s+"
    r"(?P<verdict>(?:excludes|includes) 0.*)$"
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="presdep")
    register(p.add_subparsers(dest="command", required=True))
    return p


def three_rows(n: int = 60) -> dict[str, np.ndarray]:
    """A - C = 0.35 on every query (always separable); B sits 0.02 below A with a +-0.25 per-query
    swing, so A - B is not separable (95% half-width about 1.96 x 0.25 / sqrt(60) = 0.063), while
    B - C = 0.33 +- 0.25 is."""
    x = np.random.default_rng(31).uniform(0.3, 0.4, n)
    swing = np.where(np.arange(n) % 2 == 0, 0.25, -0.25)
    return {"A": x + 0.35, "B": x + 0.33 + swing, "C": x}


def per_query(values: dict[str, np.ndarray]) -> pl.DataFrame:
    """The bootstrap's per-query rows: one dataset, one run per variant."""
    return pl.concat([
        pl.DataFrame({"dataset": "d", "variant": v, "seed": pl.Series([None] * len(x), dtype=pl.Int64),
                      "query_id": [f"q{i}" for i in range(len(x))], "value": np.asarray(x, dtype=float)})
        for v, x in values.items()
    ])


def metrics_table(column: str, values: dict[str, np.ndarray]) -> pl.DataFrame:
    spec = TABLE1_COLUMNS[column]
    rows = [{"dataset": "syn", "task": spec.task, "variant": v, "seed": None, "perturbation": spec.perturbation,
             "query_id": f"q{q}", "metric": spec.metric, "value": float(x)}
            for v, xs in values.items() for q, x in enumerate(xs)]
    return pl.DataFrame(rows, schema_overrides={"seed": pl.Int32})


def pair_lines(out: str) -> dict[str, re.Match]:
    """The printed pair lines after the pairwise header, by their "a - b" name."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("pairwise at "))
    found = {}
    for ln in lines[start + 1:]:
        m = PAIR_LINE.match(ln)
        if m is None:
            break
        found[m["pair"]] = m
    return found


def run_cli(tmp_path, capsys, column: str, *extra: str) -> tuple[str, dict]:
    path = write_table(metrics_table(column, three_rows()), tmp_path / f"{column}.parquet", "metrics")
    args = parser().parse_args(["stability", str(path), "--column", column, "--seed", "7", "--resamples", "500",
                                "--json", str(tmp_path / "o.json"), *extra])
    assert args.func(args) == 0
    return capsys.readouterr().out, json.loads((tmp_path / "o.json").read_text())["columns"][column]


@pytest.mark.parametrize(("column", "ranking", "excluded"), [
    ("rerank_ndcg10", ["A", "B", "C"], {"A - C": "A", "B - C": "B"}),   # higher is better
    ("rerank_tau_psi", ["C", "B", "A"], {"C - B": "C", "C - A": "C"}),  # lower is better
])
def test_pairs_print_the_json_differences_and_whether_they_exclude_0(tmp_path, capsys, column, ranking, excluded):
    out, res = run_cli(tmp_path, capsys, column)
    assert res["variants"] == ranking and res["tierLevel"] == 0.95
    assert "pairwise at 95% (row above - row below: difference of means [95% interval]; " \
           "excludes 0 = significantly better):" in out
    pairs = pair_lines(out)
    expected_pairs = [f"{ranking[0]} - {ranking[1]}", f"{ranking[0]} - {ranking[2]}", f"{ranking[1]} - {ranking[2]}"]
    assert list(pairs) == expected_pairs  # every unordered pair once, in ranking order
    for name, m in pairs.items():
        a, b = name.split(" - ")
        cmp = res["pairwise"][a][b]
        lo, hi = cmp["differenceInterval95"]
        assert (m["diff"], m["lo"], m["hi"]) == (f"{cmp['difference']:+.4f}", f"{lo:+.4f}", f"{hi:+.4f}")
        if name in excluded:
            assert m["verdict"] == f"excludes 0 ({excluded[name]} better)"
            assert cmp["significantlyBetter"] is True and (lo > 0 or hi < 0)
        else:
            assert m["verdict"] == "includes 0"
            assert cmp["significantlyBetter"] is False and res["pairwise"][b][a]["significantlyBetter"] is False
            assert lo < 0 < hi
    # The words follow the column's direction: a lower-is-better winner has a negative difference.
    sign = "+" if res["direction"] == "higher" else "-"
    assert all(pairs[name]["diff"].startswith(sign) for name in excluded)
    # Aligned: every pair line opens its interval at the same column.
    assert len({m.string.index("[") for m in pairs.values()}) == 1


def test_another_level_also_says_whether_the_rows_separate_there(tmp_path, capsys):
    out, res = run_cli(tmp_path, capsys, "rerank_ndcg10", "--level", "0.9")
    assert "pairwise at 90% (row above - row below: difference of means [95% interval]; " \
           "separable at 90% as in the tiers):" in out
    pairs = pair_lines(out)
    assert pairs["A - B"]["verdict"] == "includes 0; at 90%: not separable"
    assert pairs["A - C"]["verdict"] == "excludes 0 (A better); at 90%: A better"
    for name, m in pairs.items():
        a, b = name.split(" - ")
        said_better = m["verdict"].endswith(f"at 90%: {a} better")
        assert said_better == res["pairwise"][a][b]["significantlyBetter"]


def test_many_variants_print_every_pair():
    rng = np.random.default_rng(32)
    names = [f"v{i:02d}" for i in range(13)]
    res = {**paired_bootstrap(per_query({v: rng.uniform(size=20) + 0.05 * i for i, v in enumerate(names)}),
                              lower_is_better=False, resamples=200, seed=3),
           "direction": "higher"}
    pairs = pair_lines(_summary("col", res))
    order = res["variants"]
    assert list(pairs) == [f"{a} - {b}" for i, a in enumerate(order) for b in order[i + 1:]]
    assert len(pairs) == 13 * 12 // 2


def test_a_single_ranked_row_prints_no_pairwise_block():
    res = {**paired_bootstrap(per_query({"only": np.linspace(0, 1, 5)}), lower_is_better=False, resamples=50, seed=1),
           "direction": "higher"}
    out = _summary("col", res)
    assert "tiers at 95%" in out and "pairwise at" not in out
