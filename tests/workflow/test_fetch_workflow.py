"""The real files go through the catalogue entries' local-path option, in the real workflow:
DL19 (rank_llm JSON + qrels) gives pyserini's published BM25 nDCG@10 0.5058 from the identity
scorer's first-stage pass; SciFact (a BEIR folder) gives 0.6789 with our own Lucene index.
A local copy is converted into a folder keyed by its source, so two configs giving one entry
different files keep separate conversions."""

from __future__ import annotations

import json

import polars as pl
import pytest
from workflow_utils import planned_jobs, scratch_workflow, snakemake

from presdep.config.catalogue import fetch_key
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
    [dl19] = (work / "resources/datasets/dl19").glob("local-*/manifest.json")  # keyed by the local files
    manifest = json.loads(dl19.read_text())
    assert manifest["rows"] == {"queries": 43, "candidates": 4300, "judgements": 9260,
                                "candidates_per_query": {"min": 100, "max": 100},
                                "duplicate_texts": {"sets": 0, "duplicates": 0}}
    assert set(manifest["sha256"]) == {"../shared/data/trec-dl19/bm25_retrieve_results_dl19_top100.json",
                                       "../shared/data/trec-dl19/qrels.dl19-passage.txt"}
    [scifact_manifest] = (work / "resources/datasets/scifact").glob("local-*/manifest.json")
    scifact = json.loads(scifact_manifest.read_text())
    assert scifact["rows"] == {"documents": 5183, "queries": 300, "judgements": 339}


def _rm_bench_config(work, name: str, prompt_id: int) -> str:
    """A config whose rm-bench is a one-prompt file of its own (RM-Bench's published layout)."""
    rows = [{"id": prompt_id, "prompt": f"Say hi to {name}.", "chosen": ["hi", "Hi!", "**Hi**"],
             "rejected": ["no", "No!", "**No**"]}]
    (work / f"{name}.json").write_text(json.dumps(rows, indent=4) + "\n")
    (work / f"{name}.yaml").write_text(f"""\
protocol: {{M: 2}}
datasets:
  rm-bench: {{from_catalogue: true, local_path: {work / name}.json}}
synthetic: {{}}
variants:
  bm25: {{label: BM25 (identity), scorer: identity}}
""")
    return f"resources/datasets/{fetch_key('rm-bench', {'path': str(work / name) + '.json'})}/manifest.json"


def test_configs_with_different_local_files_keep_their_own_fetch(tmp_path):
    """Two configs give rm-bench different local files: each is converted into its own folder, and
    after both ran neither asks for a fetch again (they used to share resources/datasets/rm-bench/)."""
    work = scratch_workflow(tmp_path)
    targets = {name: _rm_bench_config(work, name, pid) for name, pid in (("a", 1), ("b", 2))}
    assert targets["a"] != targets["b"] and all(t.startswith("resources/datasets/rm-bench/local-") for t in targets.values())
    snakemake(work, "--cores", "1", "--configfile", "a.yaml", "--", targets["a"])
    a_written = (work / targets["a"]).stat().st_mtime_ns
    snakemake(work, "--cores", "1", "--configfile", "b.yaml", "--", targets["b"])
    assert (work / targets["a"]).stat().st_mtime_ns == a_written, "b's fetch wrote into a's folder"
    for name in ("a", "b"):
        manifest = json.loads((work / targets[name]).read_text())
        assert (manifest["catalogue_id"], manifest["version"]["local_path"]) == ("rm-bench", f"{work / name}.json")
    # a's conversion is still current after b ran (b's, just written, is too).
    out = snakemake(work, "-n", "--configfile", "a.yaml", "--", targets["a"])
    assert "Nothing to be done" in out.stdout + out.stderr, out.stdout[-2000:]
