"""The verdict reader and the opt-in control rows through the workflow on real DL19 rankings:
claims labels from a file, reranking rows scored over shuffles, the frozen reader on each
shuffle's top 5 and its table; PINE and the isolated-slots control in results/controls.csv, never
in Table 1 or the verdict table."""

from __future__ import annotations

import polars as pl
import pytest
from scorers_tiny import tiny_causal_lm
from workflow_utils import planned_jobs, scratch_workflow, snakemake

from presdep.contracts.schemas import read_metadata, read_table

CONFIG = """
protocol: {M: 3, B: {rerank: 20}}
synthetic: {}
models:
  tiny: {source: local, path: tiny, device: cpu, dtype: float32}
reader: {model: tiny}
verdict_reader: {datasets: [dl19], max_new_tokens: 4}
datasets:
  dl19:
    task: rerank
    max_queries: 6
    max_doc_chars: 60
    candidates: {format: rank_llm_json, path: ../shared/data/trec-dl19/bm25_retrieve_results_dl19_top100.json}
    qrels: {format: trec, path: ../shared/data/trec-dl19/qrels.dl19-passage.txt}
    verdict_labels: {path: labels.jsonl, format: verdicts_jsonl}
variants:
  bm25: {label: BM25 (identity), scorer: identity}
  tiny_lm: {label: Tiny LM, scorer: transformers, model: tiny}
  pine: {label: PINE, scorer: pine, model: tiny, table: controls}
  isolated: {label: Isolated slots, scorer: isolated_slots, model: tiny, table: controls}
"""
TARGETS = ("results/verdict_flip.md", "results/controls.md", "results/table1.csv")
LABELS = ("SUPPORTED", "REFUTED", "NOT ENOUGH INFO", "DISPUTED")


@pytest.mark.slow
def test_verdict_reader_on_dl19(tmp_path, shared_data):
    work = scratch_workflow(tmp_path, shared_data)
    tiny_causal_lm(work / "tiny")
    qids = sorted({line.split()[0] for line in (shared_data / "trec-dl19/qrels.dl19-passage.txt").read_text().splitlines()})
    # Test labels, not claims: every query gets one, cycling through the classes (DISPUTED included).
    (work / "labels.jsonl").write_text("".join(f'{{"query_id": "{q}", "label": "{LABELS[i % 4]}"}}\n'
                                               for i, q in enumerate(qids)), encoding="utf-8")
    (work / "verdicts.yaml").write_text(CONFIG, encoding="utf-8")
    dry = snakemake(work, "-n", *TARGETS, "--cores", "2", "--configfile", "verdicts.yaml")
    jobs = planned_jobs(dry.stdout + dry.stderr)
    # The verdict reader reads the Table 1 rows only; the controls are scored and measured.
    assert jobs["read_verdicts"] == 2 and jobs["verdict_metrics"] == 2 and jobs["verdict_table"] == 1
    assert jobs["score"] == 4 and jobs["metrics"] == 4 and jobs["controls_table"] == 1
    snakemake(work, *TARGETS, "--cores", "2", "--configfile", "verdicts.yaml")

    sampled = read_table(work / "results/dl19/candidates.parquet", "candidates")["query_id"].unique().to_list()
    gold = {q: LABELS[i % 4] for i, q in enumerate(qids)}
    disputed = sum(gold[q] == "DISPUTED" for q in sampled)
    verdicts = read_table(work / "results/verdicts/bm25/dl19.parquet", "verdicts")
    assert verdicts.filter(pl.col("perturbation") == "random_shuffle")["query_id"].n_unique() == len(sampled) - disputed
    assert read_metadata(work / "results/verdicts/bm25/dl19.parquet")["facts"]["excluded_disputed"] == disputed
    # The identity row shows the same BM25 top 5 in every shuffle: one prompt per claim, no flip.
    table = pl.read_csv(work / "results/verdict_flip.csv")
    bm25 = table.filter((pl.col("label") == "BM25 (identity)") & (pl.col("perturbation") == "random_shuffle")).row(0, named=True)
    assert bm25["verdict_flip"] == 0.0 and bm25["claims"] == len(sampled) - disputed
    assert bm25["disputed_excluded"] == disputed
    # Evidence = DL19's judged relevant passages: what share of claims had one in BM25's top 5.
    qrels = read_table(work / "results/dl19/qrels.parquet", "qrels").filter(pl.col("relevance") > 0)
    ranked = read_table(work / "results/dl19/candidates.parquet", "candidates").filter(pl.col("first_stage_rank") <= 5)
    hit = ranked.join(qrels, on=["query_id", "doc_id"])["query_id"].unique().to_list()
    read = [q for q in sampled if gold[q] != "DISPUTED"]
    assert bm25["evidence_in_topk"] == pytest.approx(sum(q in hit for q in read) / len(read))
    assert table.filter(pl.col("label") == "Tiny LM").height >= 1
    md = (work / "results/verdict_flip.md").read_text(encoding="utf-8")
    assert "| BM25 (identity) | dl19 |" in md and "| Tiny LM | dl19 |" in md

    # The control rows: their own table with Table 1's columns; Table 1 keeps its two rows.
    assert pl.read_csv(work / "results/table1.csv")["label"].to_list() == ["BM25 (identity)", "Tiny LM"]
    controls = pl.read_csv(work / "results/controls.csv")
    assert controls["label"].to_list() == ["PINE", "Isolated slots"]
    assert all(0.0 <= v <= 1.0 for v in controls["rerank_tau_psi"].to_list())
    assert set(table["label"]) == {"BM25 (identity)", "Tiny LM"}
    scores = read_table(work / "results/scores/isolated/dl19.parquet", "scores")
    assert read_metadata(work / "results/scores/isolated/dl19.parquet")["scorer"]["mode"] == "isolated"
    assert scores["score"].is_finite().all()
