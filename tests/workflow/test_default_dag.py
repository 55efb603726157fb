"""A tiny real run of the embedded default's whole DAG with the real SmolLM2 model."""

import json

import polars as pl
import pytest
from workflow_utils import TINY_DEFAULT as TINY
from workflow_utils import planned_jobs, snakemake, tiny_default_workflow

from presdep.contracts.schemas import read_table


@pytest.mark.slow
def test_whole_default_dag_runs_for_real(tmp_path, smollm2_model_dir, tiny_default_run):
    dry = snakemake(tiny_default_workflow(tmp_path, smollm2_model_dir), "-n", "--cores", "2", "--configfile", TINY)
    jobs = planned_jobs(dry.stdout + dry.stderr)
    assert jobs["train_student"] == 2 and jobs["select_lambda"] == 1 and jobs["silver_labels"] == 1
    assert "fetch_model" not in jobs

    work = tiny_default_run  # the same config run to its end
    table = pl.read_csv(work / "results/table1.csv")
    rows = {r["variant"]: r for r in table.iter_rows(named=True)}
    assert list(rows) == ["bm25", "off_the_shelf", "capcal", "round_robin", "bsc", "jina_reranker_v3", "oc_sft"]
    for name in ("off_the_shelf", "capcal", "round_robin", "bsc", "oc_sft"):
        r = rows[name]
        assert 0.0 <= r["rerank_ndcg10"] <= 1.0 and 0.0 <= r["rerank_tau_psi"] <= 1.0
        assert 0.0 <= r["rerank_jaccard"] <= 1.0
    assert rows["bm25"]["rerank_tau_psi"] == 0.0 and rows["bm25"]["rerank_jaccard"] == 1.0
    assert rows["jina_reranker_v3"]["rerank_ndcg10"] is None
    assert rows["jina_reranker_v3"]["note"].startswith("skipped: ")

    # The trained row is scored with its selected adapter and carries its seed.
    selected = json.loads((work / "results/models/oc_sft/selected.json").read_text())
    assert set(selected["adapters"]) == {"42"}
    metrics = read_table(work / "results/metrics/oc_sft/seed42/synthetic.parquet", "metrics")
    assert metrics["variant"].unique().to_list() == ["oc_sft"] and metrics["seed"].unique().to_list() == [42]

    scores = read_table(work / "results/scores/off_the_shelf/synthetic.parquet", "scores")
    probs = scores.select(pl.sum_horizontal("p0", "p1", "p2", "p3"))
    assert (probs.to_series() - 1.0).abs().max() < 1e-4
    assert (work / "results/figure1.svg").exists() and (work / "results/stability/table1.json").exists()

    again = snakemake(work, "-n", "--cores", "2", "--configfile", TINY)
    assert "Nothing to be done" in again.stdout + again.stderr
