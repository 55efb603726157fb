"""What the command line tells a user: undefined metrics said out loud, nothing written to HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl

from presdep.contracts.schemas import read_table

QRELS = "q1 0 a 1\nq1 0 b 0\nq2 0 c 2\nq2 0 d 0\nq3 0 e 1\nq4 0 g 1\n"
DOCS = {"q1": ["a", "b"], "q2": ["c", "d"], "q3": ["e", "f"], "q4": ["g", "h"]}


def _run(path: Path, scores: dict[str, list[float]]) -> str:
    lines = [f"{q} Q0 {d} {r + 1} {s} x" for q, ds in DOCS.items() for r, (d, s) in enumerate(zip(ds, scores[q]))]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_metrics_with_a_single_run_says_m_below_two(tmp_path, capsys):
    from presdep.cli import main

    (tmp_path / "qrels.txt").write_text(QRELS)
    flat = {q: [2.0, 1.0] for q in DOCS}
    first = _run(tmp_path / "first.trec", flat)
    one = _run(tmp_path / "run0.trec", {q: [1.0, 2.0] for q in DOCS})
    out = tmp_path / "m.parquet"
    rc = main(["metrics", "--runs", one, "--first-stage-run", first, "--qrels", str(tmp_path / "qrels.txt"),
               "--dataset", "d", "--variant", "v", "--out", str(out)])
    assert rc == 0
    err = capsys.readouterr().err
    assert "random_shuffle has M = 1" in err and "M < 2 leaves tau-PSI and Jaccard" in err
    m = read_table(out, "metrics").filter(pl.col("query_id").is_null() & (pl.col("perturbation") == "random_shuffle"))
    vals = dict(zip(m["metric"], m["value"]))
    # two items per query, one presentation: no pair to compare, so both are undefined
    assert vals["tau_psi"] is None or vals["tau_psi"] != vals["tau_psi"]
    assert vals.get("jaccard") is None or vals["jaccard"] != vals["jaccard"]

    # two runs: no such message
    two = _run(tmp_path / "run1.trec", flat)
    rc = main(["metrics", "--runs", one, two, "--first-stage-run", first, "--qrels", str(tmp_path / "qrels.txt"),
               "--dataset", "d", "--variant", "v"])
    assert rc == 0
    assert "M < 2" not in capsys.readouterr().err


def test_stability_writes_nothing_into_home(tmp_path):
    """`presdep stability` with HOME an empty folder and no MPLCONFIGDIR: HOME stays empty, no cache chatter."""
    home = tmp_path / "home"
    home.mkdir()
    reports = []
    for model, base in (("m1", 0.8), ("m2", 0.5)):
        for seed in (0, 1):
            tasks = [{"id": f"t{i}", "score": float((i * 7 + seed) % 10 < base * 10)} for i in range(40)]
            p = tmp_path / f"{model}-{seed}.json"
            p.write_text(json.dumps({"model": model, "seed": seed, "tasks": tasks}))
            reports.append(str(p))
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    env["HOME"] = str(home)
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run([sys.executable, "-m", "presdep.cli", "stability", *reports, "--resamples", "200",
                           "--svg", str(tmp_path / "s.svg"), "--json", str(tmp_path / "s.json")],
                          env=env, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    assert list(home.rglob("*")) == []
    assert "matplotlib" not in proc.stderr.lower()
    assert list((tmp_path / "tmp").glob("presdep-mpl-*")) == []  # the private config folder is removed at exit


def test_metrics_given_a_trec_run_as_scores_says_to_use_runs_and_never_to_delete_it(tmp_path, capsys):
    from presdep.cli import main

    (tmp_path / "qrels.txt").write_text(QRELS)
    mine = _run(tmp_path / "mine.trec", {q: [2.0, 1.0] for q in DOCS})
    rc = main(["metrics", mine, "--qrels", str(tmp_path / "qrels.txt"), "--dataset", "d", "--variant", "v"])
    err = capsys.readouterr().err
    assert rc != 0 and f"{mine}: a TREC run (line 1: 'q1 Q0 a 1 2.0 x'), not a presdep scores file" in err
    assert "--runs" in err and "delete" not in err
    assert Path(mine).exists()
