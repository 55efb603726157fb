"""Reranking sources and training pools: local rank_llm JSON, BEIR folders, BM25 through
pyserini's LuceneSearcher over a real (tiny) Lucene index, and the seeded pool split."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from presdep.data.fetch.common import FetchError
from presdep.data.fetch.run import fetch
from presdep.data.rank_llm import read_rank_llm_json
from presdep.data.trec import read_qrels


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


RERANK = {"task": "rerank", "source": {"kind": "pyserini_prebuilt", "converter": "pyserini_bm25", "index": "x",
                                       "topics": "x", "qrels": "x", "local": {"candidates": "", "qrels": ""}},
          "first_stage": {"kind": "pyserini_bm25", "k": 3, "k1": 0.9, "b": 0.4}}


def _rank_llm(path: Path, queries: dict[str, list[str]]) -> Path:
    entries = [{"query": f"text of {q}", "hits": [{"content": f"passage {d}", "qid": q, "docid": d, "rank": r,
                                                 "score": 10.0 - r} for r, d in enumerate(docs, start=1)]}
               for q, docs in queries.items()]
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def test_converter_rank_llm_json(tmp_path: Path) -> None:
    cands = _rank_llm(tmp_path / "retrieve_results.json", {"1": ["a", "b"], "2": ["c"]})
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("1 0 b 2\n2 0 c 0\n3 0 z 1\n")
    out = tmp_path / "out"
    manifest = fetch("legal-a", RERANK, out, layout="ranked", local={"candidates": str(cands), "qrels": str(qrels)})
    got = read_rank_llm_json(out / "candidates.json").sort(["query_id", "first_stage_rank"])
    assert got.select("query_id", "doc_id", "doc", "first_stage_rank").rows() == [
        ("1", "a", "passage a", 1), ("1", "b", "passage b", 2), ("2", "c", "passage c", 1)]
    # Judgements of queries without candidates are not carried (trec_eval ignores them too).
    assert read_qrels(out / "qrels.txt").select("query_id", "doc_id", "relevance").rows() == [("1", "b", 2), ("2", "c", 0)]
    assert set(manifest.sha256) == {str(cands), str(qrels)}
    assert json.loads((out / "manifest.json").read_text())["rows"] == {
        "queries": 2, "candidates": 3, "judgements": 2, "candidates_per_query": {"min": 1, "max": 2}, "duplicate_texts": {"sets": 0, "duplicates": 0}}


def test_pinned_sha256_mismatch_is_refused(tmp_path: Path) -> None:
    from presdep.data.fetch.common import verify_sha256

    f = tmp_path / "x.bin"
    f.write_bytes(b"abc")
    assert verify_sha256(f, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")  # sha256("abc"), FIPS 180-2
    with pytest.raises(FetchError, match="does not match the catalogue's pinned"):
        verify_sha256(f, "0" * 64)


def _beir(folder: Path) -> Path:
    _jsonl(folder / "corpus.jsonl", [{"_id": "d1", "title": "zebra", "text": "zebra grass river"},
                                     {"_id": "d2", "title": "", "text": "lion grass grass tree"},
                                     {"_id": "d3", "title": "bird", "text": "river tree bird bird bird"},
                                     {"_id": "d4", "title": "lion", "text": "zebra lion"},
                                     {"_id": "d5", "title": "", "text": "tree"}])
    _jsonl(folder / "queries.jsonl", [{"_id": "q1", "text": "zebra lion"}, {"_id": "q2", "text": "bird river"},
                                      {"_id": "qtrain", "text": "train only"}])
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td4\t2\nq2\td3\t1\n")
    return folder


def test_converter_beir_folder(tmp_path: Path) -> None:
    src = _beir(tmp_path / "scifact")
    out = tmp_path / "out"
    manifest = fetch("scifact", RERANK, out, layout="beir", local={"beir": str(src)})
    assert (out / "beir" / "corpus.jsonl").read_bytes() == (src / "corpus.jsonl").read_bytes()
    queries = [json.loads(x) for x in (out / "beir" / "queries.jsonl").read_text().splitlines()]
    assert queries == [{"_id": "q1", "text": "zebra lion"}, {"_id": "q2", "text": "bird river"}]  # judged in test only
    assert (out / "beir" / "qrels" / "test.tsv").read_text() == (src / "qrels" / "test.tsv").read_text()
    assert manifest.rows == {"documents": 5, "queries": 2, "judgements": 2}


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from presdep.runtime.java import JavaNotFoundError, find_java_home

    try:
        find_java_home(21)
    except JavaNotFoundError as exc:
        pytest.skip(f"pyserini needs Java >= 21: {exc}")
    from presdep.candidates.bm25 import build_index

    root = tmp_path_factory.mktemp("fetch_index")
    build_index(_beir(root / "beir"), "beir", root / "index", threads=1)
    return root / "index"


def _brute_bm25(query: str, k1: float = 0.9, b: float = 0.4) -> dict[str, float]:
    """Lucene's BM25 (no (k1+1) factor) over whitespace tokens of title + text (words Porter leaves alone)."""
    docs = {"d1": "zebra zebra grass river", "d2": "lion grass grass tree", "d3": "bird river tree bird bird bird",
            "d4": "lion zebra lion", "d5": "tree"}
    toks = {d: t.split() for d, t in docs.items()}
    avgdl = sum(map(len, toks.values())) / len(toks)
    out = {}
    for d, t in toks.items():
        s = sum(math.log(1 + (len(toks) - df + 0.5) / (df + 0.5)) * t.count(w) / (t.count(w) + k1 * (1 - b + b * len(t) / avgdl))
                for w in query.split() if t.count(w) for df in [sum(w in x for x in toks.values())])
        if s:
            out[d] = s
    return out


def test_converter_pyserini_bm25(tiny_index: Path, tmp_path: Path) -> None:
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tzebra lion\nq2\tbird river\nq9\tunjudged\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d4 2\nq2 0 d3 1\n")
    out = tmp_path / "out"
    manifest = fetch("dl19", RERANK, out, layout="ranked",
                     local={"index": str(tiny_index), "topics": str(topics), "qrels": str(qrels)})
    cands = read_rank_llm_json(out / "candidates.json")
    assert sorted(cands["query_id"].unique()) == ["q1", "q2"]  # judged topics only
    for qid, text in (("q1", "zebra lion"), ("q2", "bird river")):
        want = _brute_bm25(text)
        expected = sorted(want, key=lambda d: (-round(want[d], 4), d))[:3]  # k = 3
        got = cands.filter(cands["query_id"] == qid).sort("first_stage_rank")
        assert got["doc_id"].to_list() == expected
        for did, score in zip(got["doc_id"], got["first_stage_score"]):
            assert score == pytest.approx(want[did], abs=2e-4)
    d4 = cands.filter(cands["doc_id"] == "d4")["doc"][0]
    assert d4 == "lion\nzebra lion"  # the stored raw document, title and text on separate lines
    assert manifest.version["first_stage"]["k1"] == 0.9


def test_pool_split_is_the_seeded_sample(tmp_path: Path) -> None:
    ids = [f"q{i}" for i in range(12)]
    cands = _rank_llm(tmp_path / "train.json", {q: ["a", "b"] for q in ids})
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"{q} 0 a 1\n" for q in ids))
    entry = dict(RERANK, sampling={"n": 7, "seed": 42, "heldout": 2, "dev": 1})
    out = tmp_path / "pool"
    manifest = fetch("msmarco-train", entry, out, layout="pool_ranked", local={"candidates": str(cands), "qrels": str(qrels)})
    # The spec restated: query ids in the source's order, random.Random(42).sample of 7, the
    # held-out = the last 2 of the sampled order, dev the 1 before, train the rest.
    order = [ids[i] for i in random.Random(42).sample(range(12), 7)]
    for split, want in (("train", order[:4]), ("dev", order[4:5]), ("heldout", order[5:])):
        got = read_rank_llm_json(out / split / "candidates.json")["query_id"].unique(maintain_order=True).to_list()
        assert got == want, split
    assert manifest.rows["pool"] == 12


def test_pool_without_dev_writes_empty_dev(tmp_path: Path) -> None:
    rows = [{"question_id": f"q{i}", "question_text": "?", "answers_objects": [{"spans": ["a"]}],
             "contexts": [{"title": "A", "paragraph_text": "x", "is_supporting": True},
                          {"title": "B", "paragraph_text": "y", "is_supporting": True}]} for i in range(5)]
    path = _jsonl(tmp_path / "train.jsonl", rows)
    entry = {"task": "qa", "source": {"kind": "hf_datasets", "converter": "hotpotqa_hf", "local": {"path": ""}},
             "first_stage": {"kind": "none"}, "selection": {"paragraphs": 10, "supporting": 2},
             "sampling": {"n": 4, "seed": 42, "heldout": 1}}
    out = tmp_path / "pool"
    manifest = fetch("hotpotqa-train", entry, out, layout="pool_qa", local={"path": str(path)})
    assert (out / "dev" / "questions.jsonl").read_text() == ""
    order = [f"q{i}" for i in random.Random(42).sample(range(5), 4)]
    heldout = [json.loads(x)["question_id"] for x in (out / "heldout" / "questions.jsonl").read_text().splitlines()]
    assert heldout == order[-1:]
    assert manifest.rows["train"]["questions"] == 3


def test_sample_larger_than_pool_is_refused(tmp_path: Path) -> None:
    cands = _rank_llm(tmp_path / "t.json", {"1": ["a"]})
    (tmp_path / "q.txt").write_text("1 0 a 1\n")
    entry = dict(RERANK, sampling={"n": 5, "seed": 42, "heldout": 1})
    with pytest.raises(FetchError, match="fewer than the 5 to sample"):
        fetch("msmarco-train", entry, tmp_path / "o", layout="pool_ranked",
              local={"candidates": str(cands), "qrels": str(tmp_path / "q.txt")})
