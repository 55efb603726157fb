"""The appendix programs through the workflow on real DL19 rankings, in one run: the verdict reader,
the opt-in control rows, the width program, the pool perturbation and the context decomposition:
claims labels from a file, reranking rows scored over shuffles, the frozen reader on each
shuffle's top 5 and its table; PINE and the isolated-slots control in results/controls.csv, never
in Table 1 or the verdict table; a B = 1 alias of DL19 and the rows' C_obs and V_B; the pool
perturbation at DL19's depth of 100 (a pool of 99 and its replacement), 0 by construction for the
first-stage row and for the B = 1 read; the context decomposition's arms on 2 queries, every term 0
for the first-stage row and the terms closing for the tiny model."""

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
  dl19_b1: {alias_of: dl19, B: 1, M: 1}
width: {pairs: {dl19: dl19_b1}, resamples: 200}
pool_perturbation: {datasets: [dl19, dl19_b1], pool: 99, queries: 3, contrasts: [[Tiny LM, BM25 (identity)]], resamples: 200}
context_decomposition: {datasets: [dl19], pool: 10, shuffles: 1, queries: 2, resamples: 200}
render_perturbations: {datasets: [dl19], queries: 1, kinds: [id_relabel, scale]}
variants:
  bm25: {label: BM25 (identity), scorer: identity}
  tiny_lm: {label: Tiny LM, scorer: transformers, model: tiny}
  pine: {label: PINE, scorer: pine, model: tiny, table: controls}
  isolated: {label: Isolated slots, scorer: isolated_slots, model: tiny, table: controls}
"""
TARGETS = ("results/verdict_flip.md", "results/controls.md", "results/table1.csv", "results/width.md",
           "results/pool_perturbation.md", "results/context_decomposition.md", "results/render_perturbations.md")
LABELS = ("SUPPORTED", "REFUTED", "NOT ENOUGH INFO", "DISPUTED")


@pytest.mark.slow
def test_appendix_programs_on_dl19(tmp_path, shared_data):
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
    # Four rows on dl19 and on its B = 1 alias (the width program), which shares dl19's files.
    assert jobs["score"] == 8 and jobs["metrics"] == 8 and jobs["controls_table"] == 1 and jobs["width"] == 1
    # The pool perturbation: the two Table 1 rows (single-pass, untrained) on dl19 and its alias.
    assert jobs["score_pool"] == 4 and jobs["pool_metrics"] == 4 and jobs["pool_table"] == 1
    # The context decomposition: both Table 1 rows (the identity row reads ranks, the tiny model slots).
    assert jobs["score_context"] == 2 and jobs["context_metrics"] == 2 and jobs["context_table"] == 1
    # The render perturbations: the tiny model's row only (the identity row reads ranks, not prompts).
    assert jobs["score_render"] == 1 and jobs["render_metrics"] == 1 and jobs["render_table"] == 1
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

    # The alias is scored (one pass at B = 1) but never averaged into Table 1.
    assert read_metadata(work / "results/scores/tiny_lm/dl19_b1.parquet")["params"]["protocol"]["B"] == 1
    footnote = (work / "results/table1.md").read_text(encoding="utf-8")
    assert "dl19_b1" not in footnote
    width = pl.read_csv(work / "results/width.csv")
    bm25_w = width.filter(pl.col("label") == "BM25 (identity)").row(0, named=True)
    assert bm25_w["c_obs"] == 0.0 and bm25_w["v_b"] == 0.0  # the first-stage order at any width
    tiny_w = width.filter(pl.col("label") == "Tiny LM").row(0, named=True)
    m_native = read_table(work / "results/metrics/tiny_lm/dl19.parquet", "metrics")
    m_b1 = read_table(work / "results/metrics/tiny_lm/dl19_b1.parquet", "metrics")

    def agg(m, metric, pert):
        return m.filter(pl.col("query_id").is_null() & (pl.col("metric") == metric)
                        & (pl.col("perturbation") == pert))["value"][0]

    b1 = agg(m_b1, "ndcg@10", "first_stage")
    assert tiny_w["c_obs"] == pytest.approx(agg(m_native, "ndcg@10", "first_stage") - b1, abs=1e-6)  # CSV: 6 digits
    assert tiny_w["v_b"] == pytest.approx(agg(m_native, "ndcg10_order_averaged", "random_shuffle") - b1, abs=1e-6)

    # The pool perturbation: 3 sampled queries, canonical 99 / replace 99 / drop 98 documents.
    pools = read_table(work / "results/pool/tiny_lm/dl19.parquet", "pool_scores")
    sizes = pools.group_by("query_id", "pool").len()
    assert pools["query_id"].n_unique() == 3
    assert {p: set(sizes.filter(pl.col("pool") == p)["len"]) for p in ("canonical", "replace", "drop")} == {
        "canonical": {99}, "replace": {99}, "drop": {98}}
    means = pl.read_csv(work / "results/pool_perturbation.csv")

    def pool_value(label, dataset, pert, metric):
        row = means.filter((pl.col("label") == label) & (pl.col("dataset") == dataset)
                           & (pl.col("perturbation") == pert) & (pl.col("metric") == metric))
        return row["value"][0]

    # 0 by construction: the first-stage order (scores are ranks), and one document per forward.
    for label, dataset in (("BM25 (identity)", "dl19"), ("Tiny LM", "dl19_b1")):
        for pert in ("pool_replace", "pool_drop"):
            assert pool_value(label, dataset, pert, "pool_psi") == 0.0, (label, dataset, pert)
            assert pool_value(label, dataset, pert, "top10_changed") == 0.0
            assert pool_value(label, dataset, pert, "ndcg10_abs_change") == 0.0
    # At B = 20 the tiny model's scores follow the other documents of its prompt.
    assert pool_value("Tiny LM", "dl19", "pool_replace", "pool_psi") > 0.0
    contrasts = pl.read_csv(work / "results/pool_contrasts.csv")
    assert contrasts.filter((pl.col("a") == "Tiny LM") & (pl.col("b") == "BM25 (identity)")).height >= 1

    # The context decomposition: 2 queries x a pool of 10 in one chunk, A1 once and A2-A4 in 2 presentations.
    reads = read_table(work / "results/context/tiny_lm/dl19.parquet", "context_scores")
    assert reads["query_id"].n_unique() == 2 and reads.height == 2 * 10 * (1 + 2 * 3)
    assert read_metadata(work / "results/context/tiny_lm/dl19.parquet")["donor_length_error"]["companions"] == 2 * 2 * 10 * 9
    ctx = pl.read_csv(work / "results/context_decomposition.csv")

    def ctx_value(label, pert, metric):
        return ctx.filter((pl.col("label") == label) & (pl.col("perturbation") == pert)
                          & (pl.col("metric") == metric))["value"][0]

    for pert in ("context_canonical", "context_shuffled"):
        for term in ("width", "companion_content", "companion_presence", "skeleton"):
            assert ctx_value("BM25 (identity)", pert, term) == 0.0  # ranks: every arm alike
        parts = sum(ctx_value("Tiny LM", pert, t) for t in ("companion_content", "companion_presence", "skeleton"))
        assert parts == pytest.approx(ctx_value("Tiny LM", pert, "width"), abs=1e-5)  # CSV: 6 digits
    assert ctx_value("Tiny LM", "context_canonical", "score_width_abs") > 0.0

    # The render perturbations: 1 query x 100 documents, the first-stage pass and 5 variants per kind.
    renders = read_table(work / "results/render/tiny_lm/dl19.parquet", "scores")
    counts = dict(renders.group_by("perturbation").len().iter_rows())
    assert counts == {"first_stage": 100, "id_relabel": 500, "scale": 500}
    # Variant 0 is the canonical prompt: the score job's own first-stage read of the same documents.
    scored = read_table(work / "results/scores/tiny_lm/dl19.parquet", "scores").filter(
        pl.col("perturbation") == "first_stage").select("query_id", "doc_id", pl.col("score").alias("scored"))
    for pert in ("first_stage", "id_relabel", "scale"):
        same = renders.filter((pl.col("perturbation") == pert) & (pl.col("presentation") == 0)).join(
            scored, on=["query_id", "doc_id"])
        assert same.height == 100 and (same["score"] - same["scored"]).abs().max() < 1e-12
    rt = pl.read_csv(work / "results/render_perturbations.csv")
    tau = rt.filter((pl.col("label") == "Tiny LM") & (pl.col("metric") == "tau_psi"))
    assert set(tau["perturbation"]) == {"id_relabel", "scale"}
    assert all(0.0 < v <= 1.0 for v in tau["value"])  # both surfaces move the tiny model's ranking
    assert "| Tiny LM | dl19 | scale |" in (work / "results/render_perturbations.md").read_text(encoding="utf-8")
