"""Runs and reports: the mock provider, the report summary, and a suite run feeding `presdep stability`."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from scipy.stats import binomtest, rankdata

from presdep.bench import core
from presdep.bench.grader import score_answer
from presdep.bench.providers import MockProvider, Reply, make_provider
from presdep.bench.runner import run_benchmark, wilson_interval
from presdep.cli import main as presdep_main
from presdep.report.run_reports import MAX_FAILURE_SHARE, read_report


@pytest.fixture(scope="module")
def tasks():
    return core.load_split()


def test_mock_is_deterministic_seeded_and_keyless(tasks, monkeypatch):
    for var in ("OPENAI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    a = [r.text for r in MockProvider(7).answer(tasks)]
    assert a == [r.text for r in MockProvider(7).answer(tasks)]
    assert MockProvider(7).model_id == "mock-s7" and MockProvider(8).model_id == "mock-s8"
    assert a != [r.text for r in MockProvider(7, run=1).answer(tasks)]  # a repeated run draws anew
    s = [score_answer(t, x) for t, x in zip(tasks, a)]
    assert 0 < sum(s) < len(s)  # a mix of right and wrong
    with pytest.raises(ValueError, match="unknown provider 'nope'"):
        make_provider("nope")


@pytest.mark.parametrize("k, n", [(0, 300), (1, 300), (150, 300), (299, 300), (300, 300), (3, 7)])
def test_wilson_interval_matches_scipy(k, n):
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(k, n) == pytest.approx([ci.low, ci.high], abs=1e-9)


class _Fixed:
    """Answers from a table; None = a failed request."""

    model_id = "fixed"

    def __init__(self, answers):
        self.answers = answers

    def describe(self):
        return {"provider": "fixed"}

    def answer(self, tasks):
        return [Reply(self.answers.get(t["id"])) if t["id"] in self.answers else Reply(None, "boom")
                for t in tasks]


def test_report_totals_and_breakdowns_are_recounted(tasks):
    sub = tasks[:20] + tasks[50:70]  # two families, all five variants
    answers = {t["id"]: t["answer"] if i % 3 else "wrong" for i, t in enumerate(sub)}
    del answers[sub[5]["id"]]  # one failed request
    rep = run_benchmark(_Fixed(answers), sub, run=2)
    assert rep["model"] == "fixed" and rep["seed"] == 2 and rep["higherIsBetter"] is True
    # Hand count: i % 3 != 0 is right, except the failed index 5.
    right = {t["id"] for i, t in enumerate(sub) if i % 3 and i != 5}
    # The failed request is a failure (score null), not a wrong answer (score 0).
    assert [x["score"] for x in rep["tasks"]] == [None if i == 5 else int(t["id"] in right) for i, t in enumerate(sub)]
    assert [i for i, x in enumerate(rep["tasks"]) if x.get("failed")] == [5]
    s = rep["summary"]
    assert s["totals"] == {"tasks": 40, "answered": 39, "correct": len(right), "failed": 1}
    assert s["failedIds"] == [sub[5]["id"]]
    assert s["mean"] == len(right) / 39  # over the answered tasks
    assert s["interval95"] == wilson_interval(len(right), 39)
    assert s["failureShare"] == 1 / 40 and rep["incomplete"] is False  # 2.5% <= the 5% share
    fam, var = defaultdict(list), defaultdict(list)
    for i, t in enumerate(sub):
        if i == 5:
            continue
        fam[t["family"]].append(int(t["id"] in right))
        var[t["variant"]].append(int(t["id"] in right))
    assert {f: (g["tasks"], g["correct"]) for f, g in s["byFamily"].items()} == {f: (len(v), sum(v)) for f, v in fam.items()}
    assert {f: g["mean"] for f, g in s["byVariant"].items()} == pytest.approx({f: np.mean(v) for f, v in var.items()})


def test_written_report_is_read_by_the_stability_reader(tasks, tmp_path):
    out = core.run("mock", tasks[:10], out=tmp_path, seed=3, run=1)
    assert out["path"].endswith("mock-s3-run1.json")
    r = read_report(out["path"])
    assert r.model == "mock-s3" and r.seed == 1 and len(r.tasks) == 10


def test_suite_run_feeds_presdep_stability_end_to_end(tasks, tmp_path, capsys):
    runs = tmp_path / "runs"
    for seed, run in [(1, 0), (1, 1), (2, 0)]:
        argv = ["bench", "run", "--provider", "mock", "--seed", str(seed), "--run", str(run), "--out", str(runs)]
        assert presdep_main(argv) == 0
    files = sorted(runs.glob("*.json"))
    assert [f.name for f in files] == ["mock-s1-run0.json", "mock-s1-run1.json", "mock-s2-run0.json"]
    assert presdep_main(["stability", *map(str, files), "--resamples", "500",
                         "--json", str(tmp_path / "st.json"), "--svg", str(tmp_path / "st.svg")]) == 0
    res = json.loads((tmp_path / "st.json").read_text())["columns"]["report"]
    assert res["direction"] == "higher"
    assert sum(res["probabilityFirst"].values()) == pytest.approx(1.0)
    assert res["sharedItems"] == 60 and res["sharedRows"] == 300
    assert sorted(res["runsPerVariant"].items()) == [("mock-s1", 2), ("mock-s2", 1)]
    ps = res["promptSensitivity"]
    assert ps["promptVariants"] == ["v1", "v2", "v3", "v4", "v5"]
    assert ps["sharedItems"] == {v: 60 for v in ps["promptVariants"]}
    # Oracle from the report files: per prompt variant, mean over a model's runs of its accuracy.
    per = defaultdict(lambda: defaultdict(list))
    for f in files:
        doc = json.loads(f.read_text())
        for v in ps["promptVariants"]:
            per[doc["model"]][v].append(np.mean([x["score"] for x in doc["tasks"] if x["id"].endswith("-" + v)]))
    models = sorted(per)
    for v in ps["promptVariants"]:
        means = np.array([np.mean(per[m][v]) for m in models])
        ranks = rankdata(-means, method="average")
        for m, mu, r in zip(models, means, ranks):
            assert ps["mean"][m][v] == pytest.approx(mu)
            assert ps["ranks"][m][v] == r
        assert ps["ranking"][v] == [models[i] for i in np.lexsort((models, ranks))]
    for m in models:
        rs = [ps["ranks"][m][v] for v in ps["promptVariants"]]
        assert ps["rankRange"][m] == [min(rs), max(rs)] and ps["rankSpread"][m] == max(rs) - min(rs)
    # Full-sample means: mean over runs of each run's accuracy.
    for m in models:
        accs = [np.mean([x["score"] for x in json.loads(f.read_text())["tasks"]]) for f in files
                if json.loads(f.read_text())["model"] == m]
        assert res["mean"][m] == pytest.approx(np.mean(accs))
    printed = capsys.readouterr().out
    assert "shared items" in printed and "rank per prompt variant (v1, v2, v3, v4, v5)" in printed


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on exit: every connection to it is refused


def test_a_dead_endpoint_is_not_a_model(tasks, tmp_path, monkeypatch, capsys):
    """Every request fails: the report is marked, the command exits 3, stability refuses it."""
    monkeypatch.setenv("PRESDEP_TEST_KEY", "sk-test-dead")
    runs = tmp_path / "runs"
    argv = ["bench", "run", "--provider", "openai", "--base-url", f"http://127.0.0.1:{_closed_port()}/v1",
            "--model", "dead-1", "--api-key-env", "PRESDEP_TEST_KEY", "--limit", "4", "--out", str(runs),
            "--max-retries", "0", "--timeout", "2"]
    assert presdep_main(argv) == 3
    err = capsys.readouterr().err
    assert "4 of 4 requests failed" in err and "marked incomplete" in err
    doc = json.loads((runs / "dead-1-run0.json").read_text())
    assert doc["incomplete"] is True
    assert doc["tasks"] == [{"id": t["id"], "score": None, "failed": True} for t in tasks[:4]]
    assert doc["summary"]["mean"] is None and doc["summary"]["totals"]["answered"] == 0
    assert presdep_main(["bench", "run", "--provider", "mock", "--limit", "4", "--out", str(runs)]) == 0
    files = sorted(map(str, runs.glob("*.json")))
    with pytest.raises(ValueError, match=r"dead-1-run0\.json: 4 of 4 requests failed \(marked incomplete\)"):
        core.stability(files, resamples=50)
    assert presdep_main(["stability", *files, "--resamples", "50"]) != 0
    assert "cannot be ranked" in capsys.readouterr().err


def test_the_failure_share_is_stated_and_checked(tasks, tmp_path):
    sub = tasks[:40]
    answers = {t["id"]: t["answer"] for t in sub}
    for t in sub[:2]:  # 2 of 40 = 5%: at the share, still complete
        del answers[t["id"]]
    ok = run_benchmark(_Fixed(answers), sub)
    assert ok["incomplete"] is False and ok["summary"]["maxFailureShare"] == MAX_FAILURE_SHARE == 0.05
    del answers[sub[2]["id"]]  # 3 of 40 = 7.5%
    assert run_benchmark(_Fixed(answers), sub)["incomplete"] is True
    assert run_benchmark(_Fixed(answers), sub, max_failure_share=0.1)["incomplete"] is False
    # A complete report with failed tasks: those tasks leave the bootstrap, they do not count as 0.
    a = tmp_path / "a.json"
    a.write_text(json.dumps(ok))
    b = tmp_path / "b.json"
    b.write_text(json.dumps({**ok, "model": "other", "tasks": [{"id": t["id"], "score": 1} for t in sub]}))
    res = core.stability([a, b], resamples=50)
    assert res["mean"]["fixed"] == 1.0 and res["sharedRows"] == 38  # the 2 failed tasks are not shared
    # The share is checked on the tasks too, whatever the file's own mark says.
    bad = {**ok, "incomplete": False,
           "tasks": [{"id": t["id"], "score": None, "failed": True} for t in sub[:3]] + ok["tasks"][3:]}
    a.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="3 of 40 requests failed"):
        core.stability([a, b], resamples=50)


@pytest.mark.parametrize("task, why", [
    ({"id": "x", "score": 0, "failed": True}, "a failed task has 'failed': true and 'score': null"),
    ({"id": "x", "score": None}, "a failed task has 'failed': true and 'score': null"),
    ({"id": "x", "score": None, "failed": "yes"}, "'failed' must be true or false"),
])
def test_failed_tasks_are_read_strictly(tmp_path, task, why):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"model": "m", "tasks": [task]}))
    with pytest.raises(ValueError, match=why):
        read_report(p)
