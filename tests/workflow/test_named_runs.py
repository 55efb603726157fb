"""Named runs: a config's `name` puts every output under results/<name>/ (and its logs under
logs/<name>/), so two configs run in one checkout keep both Table 1s; resources/ stays shared."""

import re

import polars as pl
import pytest
from workflow_utils import planned_jobs, scratch_workflow, snakemake

# A tiny config of its own (it replaces the default's datasets and variants, so it has no
# Figure 1): the synthetic collection, scored by the identity scorer, no model.
TINY = """\
name: {name}
protocol: {{M: 2}}
synthetic:
  synthetic: {{seed: 13, entities: 40, candidates: 6, queries: {{train: 2, heldout: 2, test: 4}}}}
synthetic_tasks: {{}}
stability: {{resamples: 50}}
datasets:
  synthetic:
    task: rerank
    candidates: {{format: rank_llm_json, path: resources/datasets/synthetic/test/candidates.json}}
    qrels: {{format: trec, path: resources/datasets/synthetic/test/qrels.txt}}
variants:
  bm25: {{label: {label}, scorer: identity}}
"""


def _planned_paths(dry_run_output: str) -> list[str]:
    """Every output, log and benchmark path of a dry run's jobs, and the inputs of `rule all`."""
    paths = []
    for m in re.finditer(r"^    (output|log|benchmark): (.+)$", dry_run_output, re.M):
        paths += [p.strip() for p in m.group(2).split(", ")]
    final = re.search(r"^(?:local)?rule all:\n    input: (.+)$", dry_run_output, re.M)
    assert final, "the dry run lists the default target"
    paths += [p.strip() for p in final.group(1).split(", ")]
    return paths


def test_a_named_config_plans_every_output_under_its_folder(tmp_path):
    work = scratch_workflow(tmp_path)
    # The embedded default with a name: its whole DAG (data, model, training, reader, Figure 1).
    (work / "alpha.yaml").write_text("name: alpha\n")
    out = snakemake(work, "-n", "--cores", "1", "--configfile", "alpha.yaml")
    text = out.stdout + out.stderr
    paths = _planned_paths(text)
    jobs = planned_jobs(text)
    assert {"generate_synthetic", "fetch_model", "train_student", "read_answers", "figure1", "stability"} <= set(jobs)
    for name in ("table1.csv", "table1.md", "table1_counts.csv", "bsc_curve.csv", "figure1.svg", "stability/table1.json"):
        assert f"results/alpha/{name}" in paths
    assert any(p.startswith("results/alpha/scores/") for p in paths)
    assert any(p.startswith("results/alpha/models/") for p in paths)
    assert any(p.startswith("results/alpha/benchmarks/") for p in paths)
    assert "logs/alpha/table1.log" in paths
    # Nothing directly under results/ or logs/; what is fetched or generated stays in resources/.
    stray = [p for p in paths if not p.startswith(("results/alpha/", "logs/alpha/", "resources/"))]
    assert not stray, stray
    assert "resources/models/smollm2" in paths
    assert not (work / "results").exists(), "a dry run computes nothing"

    # The unnamed paths are no target of a named config.
    old = snakemake(work, "-n", "--cores", "1", "--configfile", "alpha.yaml", "--", "results/table1.csv", check=False)
    assert old.returncode != 0 and "results/table1.csv" in old.stdout + old.stderr


def test_the_default_keeps_the_unnamed_paths(tmp_path):
    work = scratch_workflow(tmp_path)
    out = snakemake(work, "-n", "--cores", "1")
    paths = _planned_paths(out.stdout + out.stderr)
    for name in ("table1.csv", "table1.md", "table1_counts.csv", "bsc_curve.csv", "figure1.svg", "stability/table1.json"):
        assert f"results/{name}" in paths
    assert "logs/table1.log" in paths and "results/scores/off_the_shelf/synthetic.parquet" in paths
    assert not [p for p in paths if p.endswith("/table1.csv") and p != "results/table1.csv"]


@pytest.mark.parametrize("bad", ["../x", "a/b"])
def test_a_bad_name_is_a_config_error_naming_the_key(tmp_path, bad):
    work = scratch_workflow(tmp_path)
    (work / "bad.yaml").write_text(f"name: {bad!r}\n")
    out = snakemake(work, "-n", "--cores", "1", "--configfile", "bad.yaml", check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert f"name: {bad!r} does not match" in text, text[-3000:]
    assert not (work / "results").exists() and not (work / "logs").exists()


@pytest.mark.slow  # about a minute: two tiny identity runs
def test_two_named_runs_in_one_checkout_keep_both_tables(tmp_path):
    work = scratch_workflow(tmp_path)
    (work / "a.yaml").write_text(TINY.format(name="a", label="First stage a"))
    (work / "b.yaml").write_text(TINY.format(name="b", label="First stage b"))

    snakemake(work, "--cores", "2", "--configfile", "a.yaml")
    # The second config reuses the generated collection in resources/ and computes only its own results.
    dry = snakemake(work, "-n", "--cores", "2", "--configfile", "b.yaml")
    jobs = planned_jobs(dry.stdout + dry.stderr)
    assert "generate_synthetic" not in jobs and jobs["table1"] == 1 and jobs["score"] == 1
    snakemake(work, "--cores", "2", "--configfile", "b.yaml")

    a = pl.read_csv(work / "results/a/table1.csv")
    b = pl.read_csv(work / "results/b/table1.csv")
    assert a["label"].to_list() == ["First stage a"] and b["label"].to_list() == ["First stage b"]
    cells = ["variant", "rerank_ndcg10", "rerank_tau_psi", "rerank_jaccard"]
    assert a.select(cells).equals(b.select(cells)), "same data and scorer: the same numbers"
    for run in ("a", "b"):
        for name in ("table1.md", "table1_counts.csv", "bsc_curve.csv", "stability/table1.json",
                     "metrics/bm25/synthetic.parquet", "scores/bm25/synthetic.parquet", "synthetic/candidates.parquet"):
            assert (work / "results" / run / name).exists(), (run, name)
        assert (work / "logs" / run / "table1.log").exists()
    top = {p.name for p in (work / "results").iterdir()}
    assert top == {"a", "b"}, f"nothing directly under results/: {sorted(top)}"
    assert {p.name for p in (work / "logs").iterdir()} == {"a", "b"}

    # Running b left a complete and up to date.
    again = snakemake(work, "-n", "--cores", "2", "--configfile", "a.yaml")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_named_config_asked_for_an_unnamed_path_says_where_its_table_is(tmp_path):
    work = scratch_workflow(tmp_path)
    (work / "tiny.yaml").write_text(TINY.format(name="beta", label="First stage"))
    out = snakemake(work, "results/table1.csv", "-n", "--cores", "1", "--configfile", "tiny.yaml", check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "No rule to produce" not in text
    assert ("this config is named 'beta': its results are under results/beta/, so ask for results/beta/table1.csv "
            "instead of results/table1.csv") in text
    # Its own table plans as usual (the guard matches only an unnamed run's paths).
    ok = snakemake(work, "results/beta/table1.csv", "-n", "--cores", "1", "--configfile", "tiny.yaml")
    assert planned_jobs(ok.stdout + ok.stderr)["table1"] == 1
