"""DL19 from its original files (TREC run, topics, qrels) with the passages given in every
admitted corpus format but irds: the fixture is the same whichever format carries the texts,
and its first-stage order gives pyserini's published BM25 nDCG@10 (0.5058)."""

from __future__ import annotations

import html
import json

import numpy as np
import polars as pl
import pytest
from records_tiny import fixture_dataset

from presdep.candidates.fixtures import build_fixture
from presdep.contracts.schemas import read_table
from presdep.data.corpus import CORPUS_FORMATS
from presdep.metrics.quality import ndcg_runs


@pytest.fixture(scope="module")
def dl19(shared_data):
    base = shared_data / "trec-dl19"
    if not base.is_dir():
        pytest.skip(f"DL19 files not found at {base}")
    return base


def _passages(dl19) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in json.loads((dl19 / "bm25_retrieve_results_dl19_top100.json").read_text(encoding="utf-8")):
        for hit in entry["hits"]:
            out.setdefault(str(hit["docid"]), hit["content"])
    return out


def _corpus_files(dl19, folder) -> dict[str, str]:
    """format -> a corpus path in that format holding the JSON's passages."""
    passages = _passages(dl19)
    folder.mkdir()
    (folder / "collection.tsv").write_text("".join(f"{d}\t{t}\n" for d, t in passages.items()), encoding="utf-8")
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in passages.items()), encoding="utf-8")
    (folder / "docs.trec").write_text("".join(
        f"<DOC>\n<DOCNO>{d}</DOCNO>\n<TEXT>\n{html.escape(t, quote=False)}\n</TEXT>\n</DOC>\n"
        for d, t in passages.items()), encoding="utf-8")
    beir = folder / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in passages.items()), encoding="utf-8")
    return {"rank_llm_json": str(dl19 / "bm25_retrieve_results_dl19_top100.json"),
            "tsv": str(folder / "collection.tsv"), "jsonl": str(folder / "corpus.jsonl"),
            "trec": str(folder / "docs.trec"), "beir": str(beir)}


def _first_stage_ndcg10(cands: pl.DataFrame, qrels: pl.DataFrame) -> float:
    run = {q: {d: -float(r) for d, r in zip(g["doc_id"], g["first_stage_rank"])}
           for (q,), g in cands.group_by("query_id")}
    judged: dict[str, dict[str, int]] = {}
    for q, d, g in qrels.iter_rows():
        judged.setdefault(q, {})[d] = int(g)
    return float(np.mean(list(ndcg_runs(run, judged, 10).values())))


def test_every_corpus_format_gives_the_same_dl19_candidates(dl19, tmp_path):
    corpora = _corpus_files(dl19, tmp_path / "corpora")
    assert sorted(corpora) == sorted(set(CORPUS_FORMATS) - {"irds"})  # a new format must be added here
    built = {}
    for fmt, path in corpora.items():
        cfg = {"task": "rerank",
               "candidates": {"format": "trec_run", "run": str(dl19 / "bm25_trec_run_dl19_top100.txt"),
                              "corpus": {"format": fmt, "path": path},
                              "topics": {"format": "trec", "path": str(dl19 / "topics.dl19-passage.txt"),
                                         "split": "test"}},
               "qrels": {"format": "trec", "path": str(dl19 / "qrels.dl19-passage.txt")}}
        out = tmp_path / fmt
        out.mkdir()
        build_fixture(fixture_dataset("dl19", cfg, seed=4401), out / "c.parquet", out / "q.parquet")
        built[fmt] = (read_table(out / "c.parquet", "candidates"), read_table(out / "q.parquet", "qrels"))
    cols = ["query_id", "query", "doc_id", "doc", "first_stage_rank"]
    reference, qrels = built["rank_llm_json"]
    assert reference.height == 4300 and reference["query_id"].n_unique() == 43
    for fmt, (cands, _) in built.items():
        assert cands.select(cols).equals(reference.select(cols)), fmt  # ids, texts and order
    # The texts are the rank_llm JSON's own, so the fixture equals reading that file as candidates.
    from presdep.data.rank_llm import read_rank_llm_json

    original = read_rank_llm_json(dl19 / "bm25_retrieve_results_dl19_top100.json").sort("query_id", "first_stage_rank")
    assert reference.select("query_id", "doc_id", "doc").equals(original.select("query_id", "doc_id", "doc"))
    assert round(_first_stage_ndcg10(reference, qrels.select("query_id", "doc_id", "relevance")), 4) == 0.5058
