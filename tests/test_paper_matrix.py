"""The paper matrix (configs/paper.yaml) dry-runs offline with the DAG its config implies."""

from __future__ import annotations

import re

import pytest
import yaml

from workflow_utils import REPO, planned_jobs, scratch_workflow, snakemake

PAPER = "configs/paper.yaml"
# Every wildcard the workflow may use. A presentation index (m, t, k) must never be one:
# a score job loops over all presentations and writes one file.
ALLOWED_WILDCARDS = {"dataset", "variant", "collection", "split", "index", "model", "B", "teacher", "student", "seed"}


@pytest.fixture(scope="module")
def paper_dry_run(tmp_path_factory):
    work = scratch_workflow(tmp_path_factory.mktemp("paper"))
    out = snakemake(work, "-n", "--configfile", PAPER, "--", "results/table1.csv", timeout=300)
    assert not (work / "results").exists() and not (work / "resources").exists(), "a dry run computes nothing"
    return out.stdout + out.stderr


def _expected_core_jobs(cfg: dict) -> dict[str, int]:
    """The per-dataset and per-(variant, dataset) job counts the config implies."""
    datasets = cfg["datasets"]
    runnable = [v for v in cfg["variants"].values() if not v.get("skip")]
    bm25 = {name: d["candidates"] for name, d in datasets.items() if d["candidates"]["format"] == "bm25"}
    return {
        "build_index": len({c.get("index", name) for name, c in bm25.items()}),
        "retrieve": len(bm25),
        "build_fixture": len(datasets),
        "score": len(runnable) * len(datasets),
        "metrics": len(runnable) * len(datasets),
        # t* is tuned once per (run, reranking dataset) on the development half.
        "thresholds": len(runnable) * sum(d["task"] == "rerank" for d in datasets.values()),
        "table1": 1,
    }


def test_paper_config_is_the_paper_geometry():
    cfg = yaml.safe_load((REPO / PAPER).read_text())
    assert cfg["protocol"]["M"] == 10
    assert cfg["protocol"]["B"] == {"rerank": 20, "qa": 10, "response": 4}
    assert cfg["models"]["qwen3_4b"] == {**cfg["models"]["qwen3_4b"], "source": "hf", "id": "Qwen/Qwen3-4B"}
    variants = cfg["variants"]
    assert {variants[v].get("calibration") for v in variants if not variants[v].get("skip")} == {None, "capcal"}
    assert [v.get("bsc_k") for v in variants.values() if v.get("bsc_k")] == [10]
    assert any(v.get("chunking") == "round_robin" for v in variants.values())
    assert all(v.get("skip") or v.get("model") == "qwen3_4b" for v in variants.values())
    assert len(cfg["datasets"]) >= 14


def test_paper_matrix_dry_runs_with_the_expected_jobs(paper_dry_run):
    cfg = yaml.safe_load((REPO / PAPER).read_text())
    jobs = planned_jobs(paper_dry_run)
    expected = _expected_core_jobs(cfg)
    assert {rule: jobs.get(rule, 0) for rule in expected} == expected
    # Anything else (model fetch, CapCal prior, ...) is per model or per (model, B),
    # never per dataset x variant x presentation.
    per_model = len(cfg["models"]) * len(set(cfg["protocol"]["B"].values()))
    others = {rule: n for rule, n in jobs.items() if rule not in expected}
    assert all(n <= per_model for n in others.values()), others
    assert sum(jobs.values()) < 3000, "the paper matrix must stay in the low thousands of jobs"


def test_no_presentation_is_a_wildcard(paper_dry_run):
    names = set()
    for line in re.findall(r"^\s+wildcards: (.+)$", paper_dry_run, re.M):
        names |= {kv.split("=", 1)[0].strip() for kv in line.split(", ")}
    assert names, "the dry run printed no wildcards"
    assert names <= ALLOWED_WILDCARDS, f"unexpected wildcards: {names - ALLOWED_WILDCARDS}"
    assert not re.search(r"(presentation|shuffle)s?[/_]?\d", paper_dry_run), "a path is keyed by a presentation"
