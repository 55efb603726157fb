"""The real workflow: lint, dry runs, and a real run on DL19 with the identity scorer."""

import polars as pl
import pytest
from workflow_utils import planned_jobs, scratch_workflow, snakemake

from presdep.contracts.schemas import read_table

DL19 = "configs/examples/dl19-identity.yaml"


def test_lint_is_clean(tmp_path):
    work = scratch_workflow(tmp_path)
    out = snakemake(work, "--lint")
    assert "Congratulations, your workflow is in a good condition!" in out.stdout + out.stderr


def test_dry_run_of_the_default_lists_the_dag(tmp_path):
    work = scratch_workflow(tmp_path)
    out = snakemake(work, "-n", "--cores", "1", "results/table1.csv")
    jobs = planned_jobs(out.stdout + out.stderr)
    assert jobs["table1"] == 1 and jobs["generate_synthetic"] == 1
    assert jobs["score"] == jobs["metrics"] >= 1
    assert not (work / "results").exists(), "a dry run computes nothing"


def test_model_threads_sets_every_model_job_and_light_jobs_keep_one(tmp_path):
    """``model_threads`` reaches the score, training, silver and reader jobs (Snakemake caps it
    at --cores); the identity scorer and the metrics stay at one thread."""
    import re

    work = scratch_workflow(tmp_path)
    threads = {}
    for n in (1, 3):
        out = snakemake(work, "results/table1.csv", "-n", "--cores", "8", "--config", f"model_threads={n}")
        jobs = re.split(r"\n(?:local)?rule ", out.stdout + out.stderr)
        got = {}
        for job in jobs[1:]:
            name = job.split(":", 1)[0]
            m = re.search(r"^\s*output: (\S+)", job, re.M)
            t = re.search(r"^\s*threads: (\d+)", job, re.M)
            got[(name, m.group(1) if m else "")] = int(t.group(1)) if t else 1
        threads[n] = got
    model_rules = {"train_student", "silver_labels", "read_answers"}
    model_jobs = {k for k in threads[3] if k[0] in model_rules or (k[0] == "score" and "/bm25/" not in k[1])}
    assert {k[0] for k in model_jobs} >= model_rules | {"score"}
    assert {threads[3][k] for k in model_jobs} == {3} and {threads[1][k] for k in model_jobs} == {1}
    light = [k for k in threads[3] if k[0] in ("metrics", "thresholds") or (k[0] == "score" and "/bm25/" in k[1])]
    assert light and {threads[3][k] for k in light} == {1}


def test_bad_config_is_refused_with_the_key(tmp_path):
    work = scratch_workflow(tmp_path)
    (work / "bad.yaml").write_text("datasets:\n  x: {task: ranking, candidates: {format: rank_llm_json}, qrels: {format: trec, path: q}}\n")
    out = snakemake(work, "-n", "--configfile", "bad.yaml", check=False)
    assert out.returncode != 0
    assert "ranking" in out.stdout + out.stderr


@pytest.mark.slow
def test_dl19_identity_end_to_end(tmp_path, shared_data):
    work = scratch_workflow(tmp_path, shared_data)
    # Snakemake's --configfile takes several values, so the target goes first.
    snakemake(work, "results/table1.csv", "--cores", "2", "--configfile", DL19)

    table = pl.read_csv(work / "results/table1.csv")
    assert table["variant"].to_list() == ["bm25"], "the example's variants replace the default's"
    row = table.row(0, named=True)
    assert round(row["rerank_ndcg10"], 4) == 0.5058  # pyserini's published BM25 figure
    assert row["rerank_tau_psi"] == 0.0 and row["rerank_jaccard"] == 1.0
    assert row["qa_ndcg10"] is None and row["resp_ndcg1"] is None

    metrics = read_table(work / "results/metrics/bm25/dl19.parquet", "metrics")
    assert metrics["dataset"].unique().to_list() == ["dl19"]
    agg = metrics.filter(
        pl.col("query_id").is_null() & (pl.col("metric") == "ndcg@10") & (pl.col("perturbation") == "first_stage")
    )
    assert round(agg["value"][0], 4) == 0.5058  # the first-stage pass gives the quality cell
    per_query = metrics.filter(pl.col("query_id").is_not_null() & (pl.col("metric") == "ndcg@10") & (pl.col("perturbation") == "first_stage"))
    assert per_query.height == 43
    assert not list((work / "results").glob("synthetic*")), "only DL19 is computed"

    # The default target (rule all) completes the rest; re-running after success does nothing.
    snakemake(work, "--cores", "2", "--configfile", DL19)
    again = snakemake(work, "-n", "--cores", "2", "--configfile", DL19)
    assert "Nothing to be done" in again.stdout + again.stderr

    # Deleting one metrics file re-runs only what depends on it.
    (work / "results/metrics/bm25/dl19.parquet").unlink()
    dry = snakemake(work, "-n", "--cores", "2", "--configfile", DL19)
    assert planned_jobs(dry.stdout + dry.stderr) == {"metrics": 1, "table1": 1, "bsc_curve": 1, "stability": 1,
                                                     "figure1": 1, "position_profile": 1, "discordance": 1,
                                                     "contrasts": 1, "all": 1}
    snakemake(work, "--cores", "2", "--configfile", DL19)
    assert (work / "results/metrics/bm25/dl19.parquet").exists()
