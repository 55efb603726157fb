"""The real files go through the catalogue entries' local-path option, in the real workflow:
DL19 (rank_llm JSON + qrels) gives pyserini's published BM25 nDCG@10 0.5058 from the identity
scorer's first-stage pass; SciFact (a BEIR folder) gives 0.6789 with our own Lucene index."""

from __future__ import annotations

import json

import polars as pl
import pytest
from workflow_utils import planned_jobs, scratch_workflow, snakemake

from presdep.contracts.schemas import read_table

CONFIG = """\
protocol: {M: 2}
datasets:
  dl19:
    from_catalogue: true
    local_path:
      candidates: ../shared/data/trec-dl19/bm25_retrieve_results_dl19_top100.json
      qrels: ../shared/data/trec-dl19/qrels.dl19-passage.txt
  scifact: {from_catalogue: true, local_path: ../shared/data/beir-scifact}
  rm-bench: {from_catalogue: true, local_path: ../shared/data/rm-bench/chat_filtered.json, max_queries: 10}
  legal-a: {from_catalogue: true}
synthetic: {}
variants:
  bm25: {label: BM25 (identity), scorer: identity}
"""


def _first_stage_ndcg10(work, dataset: str) -> float:
    metrics = read_table(work / f"results/metrics/bm25/{dataset}.parquet", "metrics")
    agg = metrics.filter(pl.col("query_id").is_null() & (pl.col("metric") == "ndcg@10")
                         & (pl.col("perturbation") == "first_stage"))
    return float(agg["value"][0])


def test_catalogue_dry_run_lists_the_fetch_jobs(tmp_path, shared_data):
    work = scratch_workflow(tmp_path, shared_data)
    (work / "cat.yaml").write_text(CONFIG)
    out = snakemake(work, "-n", "--configfile", "cat.yaml", "--", "results/table1.csv")
    jobs = planned_jobs(out.stdout + out.stderr)
    assert (jobs["fetch_dataset"], jobs["fetch_dataset_beir"]) == (2, 1)  # dl19 + rm-bench; scifact's BEIR folder
    assert jobs["build_index"] == jobs["retrieve"] == 1 and jobs["build_fixture"] == 3  # legal-a is skipped


@pytest.mark.slow
def test_real_files_through_the_catalogue(tmp_path, shared_data):
    work = scratch_workflow(tmp_path, shared_data)
    (work / "cat.yaml").write_text(CONFIG)
    snakemake(work, "results/table1.csv", "--cores", "2", "--configfile", "cat.yaml", timeout=1200)
    assert round(_first_stage_ndcg10(work, "dl19"), 4) == 0.5058  # pyserini's published BM25 figure
    assert round(_first_stage_ndcg10(work, "scifact"), 4) == 0.6789  # pyserini's BEIR flat regression
    manifest = json.loads((work / "resources/datasets/dl19/manifest.json").read_text())
    assert manifest["rows"] == {"queries": 43, "candidates": 4300, "judgements": 9260}
    assert set(manifest["sha256"]) == {"../shared/data/trec-dl19/bm25_retrieve_results_dl19_top100.json",
                                       "../shared/data/trec-dl19/qrels.dl19-passage.txt"}
    scifact = json.loads((work / "resources/datasets/scifact/manifest.json").read_text())
    assert scifact["rows"] == {"documents": 5183, "queries": 300, "judgements": 339}
