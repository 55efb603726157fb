"""The rehearsal's synthetic originals: one per catalogue source, byte-stable, and read by presdep's own readers.

The list of sources comes from the catalogue YAML itself, so an entry added there without an
original writer fails here. Every original goes through the reader the fetch uses for it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from presdep.config.catalogue import CATALOGUE_PATH
from presdep.config.query_lists import QueryList
from presdep.data.fetch import qa, rerank, responses
from presdep.data.fetch.common import read_rows, select_paragraphs
from presdep.data.fetch.run import _reader_args
from presdep.data.fetch.sources import extract_member
from presdep.data.trec import read_topics
from presdep.rehearsal.originals import write_originals

SIZES = {"queries": 6, "docs_per_query": 10, "pool_rows": 40}
DL_FILES = {  # Anserini's cache names, restated
    "dl19": ("topics.dl19-passage.txt", "qrels.dl19-passage.txt"), "dl20": ("topics.dl20.txt", "qrels.dl20-passage.txt"),
    "dl21": ("topics.dl21.txt", "qrels.dl21-passage.txt"), "dl22": ("topics.dl22.txt", "qrels.dl22-passage.txt"),
    "dl23": ("topics.dl23.txt", "qrels.dl23-passage.txt"),
}
DL_INDEX = {"dl19": "msmarco-v1-passage", "dl20": "msmarco-v1-passage", "dl21": "msmarco-v2-passage",
            "dl22": "msmarco-v2-passage", "dl23": "msmarco-v2-passage"}
TOPICS = Path("anserini/topics-and-qrels")


def _catalogue() -> dict:
    return yaml.safe_load(CATALOGUE_PATH.read_text(encoding="utf-8"))


def _entries() -> list[tuple[str, str, dict]]:
    cat = _catalogue()
    return [(section, cid, entry) for section in ("datasets", "training_pools") for cid, entry in cat[section].items()]


def _expected_rows(section: str) -> int:
    return SIZES["pool_rows"] if section == "training_pools" else SIZES["queries"]


def _beir_name(cid: str, entry: dict) -> str:
    return re.fullmatch(r"beir-v1\.0\.0-(.+)\.flat", entry["source"]["index"]).group(1)


def _topics_qrels_paths(cid: str, entry: dict) -> tuple[Path, Path]:
    if cid in DL_FILES:
        t, q = DL_FILES[cid]
    else:
        x = _beir_name(cid, entry)
        t, q = f"topics.beir-v1.0.0-{x}.test.tsv.gz", f"qrels.beir-v1.0.0-{x}.test.txt"
    return TOPICS / t, TOPICS / q


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("originals")
    return root, write_originals(root, **SIZES)


def _docs(path: Path) -> dict[str, dict]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        assert d["id"] not in out, f"{path}: document {d['id']} twice"
        out[d["id"]] = d
    return out


def _grades(path: Path) -> dict[str, dict[str, int]]:
    return rerank.read_grades(path)


# --------------------------------------------------------------------------- coverage


def test_every_catalogue_source_has_its_original(written) -> None:
    root, report = written
    assert json.loads(json.dumps(report)) == report  # JSON-ready, for the build's manifest
    kinds = Counter()
    for section, cid, entry in _entries():
        source = entry["source"]
        kinds[source["kind"]] += 1
        assert cid in report[section], f"{section}.{cid} has no original"
        if source["kind"] == "hf_datasets":
            folder = root / "hub" / "datasets" / source["id"]
            data = folder / (source.get("config") or "data") / f"{source['split']}-00000-of-00001.parquet"
            assert data.is_file() and (folder / "README.md").is_file(), cid
        elif source["kind"] == "url":
            name = source.get("filename") or source["url"].split("?")[0].split("/")[-1]
            assert (root / "files" / name).is_file(), cid
        elif source["kind"] == "user_supplied":
            local = source["local"]
            if local.get("beir"):
                for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
                    assert (root / "local" / cid / f).is_file(), (cid, f)
                for f in _topics_qrels_paths(cid, entry):
                    assert (root / f).is_file(), (cid, f)
            else:
                assert local == {"candidates": "rank_llm_json", "qrels": "trec"}, cid
                assert (root / "local" / cid / "candidates.json").is_file()
                assert (root / "local" / cid / "qrels.txt").is_file()
        elif source["kind"] == "pyserini_prebuilt":
            assert (root / "lucene" / source["index"] / "docs.jsonl").is_file(), cid
            if isinstance(source["topics"], dict):
                assert source["topics"]["id"] == "msmarco-passage/train/judged"
                for f in ("queries.tsv", "qrels"):
                    assert (root / "ir_datasets" / "msmarco-passage" / "train" / f).is_file()
            else:
                for f in _topics_qrels_paths(cid, entry):
                    assert (root / f).is_file(), (cid, f)
        else:
            pytest.fail(f"{section}.{cid}: source kind {source['kind']!r} has no original in the rehearsal")
    assert set(kinds) == {"hf_datasets", "url", "user_supplied", "pyserini_prebuilt"}
    indexes = {e["source"]["index"] for _, _, e in _entries() if e["source"]["kind"] == "pyserini_prebuilt"}
    assert set(report["indexes"]) == indexes
    for index, info in report["indexes"].items():
        assert info["docs"] == len(_docs(root / info["path"]))


def test_two_writes_are_byte_identical(written, tmp_path: Path) -> None:
    root, report = written
    again = write_originals(tmp_path / "again", **SIZES)
    assert again == report
    first, second = _tree(root), _tree(tmp_path / "again")
    assert first == second
    assert len(first) > 50


def test_other_sizes_and_seeds(tmp_path: Path) -> None:
    small = write_originals(tmp_path / "a", queries=2, docs_per_query=3, seed=5, pool_rows=4)
    assert small["datasets"]["fiqa"]["rows"]["judged"] == 2
    assert small["datasets"]["dl19"]["rows"]["judged"] == 43  # a DL set always has its whole list
    assert small["datasets"]["dl19"]["rows"]["documents"] == 43 * 3
    assert small["training_pools"]["msmarco-train"]["rows"]["judged"] == 4
    assert small["datasets"]["rewardbench2"]["rows"] == {"rows": 2}
    other = write_originals(tmp_path / "b", queries=2, docs_per_query=3, seed=6, pool_rows=4)
    assert _tree(tmp_path / "a").keys() == _tree(tmp_path / "b").keys()
    assert _tree(tmp_path / "a") != _tree(tmp_path / "b")
    assert small["params"] != other["params"]


# --------------------------------------------------------------------------- through presdep's readers


def _original_file(root: Path, entry: dict, tmp: Path) -> Path:
    source = entry["source"]
    if source["kind"] == "hf_datasets":
        return root / "hub" / "datasets" / source["id"] / (source.get("config") or "data") / \
            f"{source['split']}-00000-of-00001.parquet"
    name = source.get("filename") or source["url"].split("?")[0].split("/")[-1]
    return extract_member(root / "files" / name, source.get("member"), tmp)


@pytest.mark.parametrize("cid", [c for _, c, e in _entries() if e["task"] == "qa"])
def test_qa_originals_convert_with_the_catalogue_selection(written, tmp_path: Path, cid: str) -> None:
    root, _ = written
    section, _, entry = next(x for x in _entries() if x[1] == cid)
    path = _original_file(root, entry, tmp_path)
    sel = entry["selection"]
    records = list(qa.READERS[entry["source"]["converter"]](path))
    assert len(records) == _expected_rows(section)
    for rec in records:
        kept = select_paragraphs(rec, int(sel["paragraphs"]), int(sel["supporting"]))
        assert kept is not None, f"{cid} {rec.qid}: not {sel['supporting']} supporting paragraphs"
        assert len(kept.paragraphs) == int(sel["paragraphs"])
        assert sum(p[2] for p in kept.paragraphs) == int(sel["supporting"])
        assert rec.answers[0] and rec.answers[0] in " ".join(t for _, t, s in rec.paragraphs if s)
    assert len({r.qid for r in records}) == len(records)


@pytest.mark.parametrize("cid", [c for _, c, e in _entries() if e["task"] == "response"])
def test_response_originals_convert(written, tmp_path: Path, cid: str) -> None:
    root, _ = written
    section, _, entry = next(x for x in _entries() if x[1] == cid)
    path = _original_file(root, entry, tmp_path)
    queries = list(responses.READERS[entry["source"]["converter"]](path, **_reader_args(entry)))
    assert len(queries) == _expected_rows(section)
    per_prompt = {"ppe": int(entry.get("responses_per_prompt", 8)), "nectar": 7, "rm_bench_json": 6,
                  "rewardbench2": 4, "ultrafeedback": 4}[entry["source"]["converter"]]
    seen_grades = set()
    for q in queries:
        assert len(q.docs) == per_prompt and len({t for _, t, _ in q.docs}) == per_prompt
        assert set(q.grades) == {d for d, _, _ in q.docs}
        seen_grades |= set(q.grades.values())
        if entry["source"]["converter"] != "ultrafeedback":
            assert len(set(q.grades.values())) >= 2, f"{cid} {q.query_id}: one grade only"
    assert len(seen_grades) >= 2


def test_hf_parquet_has_the_published_types(written) -> None:
    root, _ = written
    schema = pq.read_schema(root / "hub/datasets/hotpotqa/hotpot_qa/distractor/validation-00000-of-00001.parquet")
    assert schema.field("context").type == pa.struct([("title", pa.list_(pa.string())),
                                                      ("sentences", pa.list_(pa.list_(pa.string())))])
    assert schema.field("supporting_facts").type == pa.struct([("title", pa.list_(pa.string())),
                                                               ("sent_id", pa.list_(pa.int32()))])
    rows = [r for _, r in read_rows(root / "hub/datasets/lmarena-ai/PPE-MATH-Best-of-K/data/train-00000-of-00001.parquet")]
    assert all(isinstance(s, bool) for s in rows[0]["scores"]) and "response_32" in rows[0]
    readme = (root / "hub/datasets/hotpotqa/hotpot_qa/README.md").read_text()
    front = yaml.safe_load(readme.split("---\n")[1])
    assert front["configs"] == [{"config_name": "distractor", "data_files": [
        {"split": "train", "path": "distractor/train-00000-of-00001.parquet"},
        {"split": "validation", "path": "distractor/validation-00000-of-00001.parquet"}]}]


def test_hf_folders_load_with_datasets(written, tmp_path: Path) -> None:
    import datasets  # a dependency of presdep (hf_datasets sources)
    root, _ = written
    for section, cid, entry in _entries():
        source = entry["source"]
        if source["kind"] != "hf_datasets":
            continue
        ds = datasets.load_dataset(str(root / "hub" / "datasets" / source["id"]), source.get("config"),
                                   split=source["split"], cache_dir=str(tmp_path / "cache"))
        assert ds.num_rows == _expected_rows(section), cid


@pytest.mark.parametrize("cid", [c for _, c, e in _entries() if (e["source"].get("local") or {}).get("beir")
                                 and e["source"]["kind"] == "user_supplied"])
def test_beir_folders_copy_as_a_local_copy(written, tmp_path: Path, cid: str) -> None:
    root, _ = written
    rows = rerank.copy_beir_folder(root / "local" / cid, tmp_path / "beir")
    assert rows["queries"] == SIZES["queries"]
    assert rows["documents"] == SIZES["queries"] * SIZES["docs_per_query"]
    assert rows["judgements"] >= SIZES["queries"]
    first = (root / "local" / cid / "qrels" / "test.tsv").read_text().splitlines()[0]
    assert first == "query-id\tcorpus-id\tscore"


@pytest.mark.parametrize("cid", [c for _, c, e in _entries() if (e["source"].get("local") or {}).get("candidates")
                                 and e["source"]["kind"] == "user_supplied"])
def test_rank_llm_candidates_read_as_a_local_copy(written, cid: str) -> None:
    root, _ = written
    queries = rerank.rank_llm_local(root / "local" / cid / "candidates.json", root / "local" / cid / "qrels.txt")
    assert len(queries) == SIZES["queries"]
    for q in queries:
        assert len(q.docs) == SIZES["docs_per_query"]
        scores = [s for _, _, s in q.docs]
        assert scores == sorted(scores, reverse=True)
        assert max(q.grades.values()) >= 2 and q.grades.get(q.docs[0][0]) == max(q.grades.values())


# --------------------------------------------------------------------------- judgements and retrieval


def _ranked_sets(root: Path):
    """(catalogue id, topics, grades, {doc id: text}) of every set with topics and qrels files."""
    docs_cache: dict[Path, dict[str, str]] = {}
    for section, cid, entry in _entries():
        source = entry["source"]
        if source["kind"] == "pyserini_prebuilt" and isinstance(source["topics"], dict):
            folder = root / "ir_datasets" / "msmarco-passage" / "train"
            topics, qrels, corpus = folder / "queries.tsv", folder / "qrels", root / "lucene" / source["index"] / "docs.jsonl"
        elif source["kind"] == "pyserini_prebuilt" or (source["kind"] == "user_supplied" and source.get("index")):
            t, q = _topics_qrels_paths(cid, entry)
            topics, qrels = root / t, root / q
            corpus = (root / "lucene" / source["index"] / "docs.jsonl" if source["kind"] == "pyserini_prebuilt"
                      else root / "local" / cid / "corpus.jsonl")
        else:
            continue
        if corpus not in docs_cache:
            docs_cache[corpus] = {}
            for line in corpus.read_text(encoding="utf-8").splitlines():
                d = json.loads(line)
                docs_cache[corpus][d.get("id", d.get("_id"))] = d.get("contents") or f"{d['title']}\n{d['text']}"
        yield cid, entry, read_topics(topics), _grades(qrels), docs_cache[corpus]


def _bm25(docs: dict[str, str], k1: float, b: float):
    toks = {d: Counter(re.findall(r"[a-z0-9]+", t.lower())) for d, t in docs.items()}
    lengths = {d: sum(c.values()) for d, c in toks.items()}
    avg = sum(lengths.values()) / len(lengths)
    postings: dict[str, list[str]] = {}
    for d, c in toks.items():
        for w in c:
            postings.setdefault(w, []).append(d)

    def search(query: str) -> list[str]:
        scores: Counter = Counter()
        for w in set(re.findall(r"[a-z0-9]+", query.lower())):
            ds = postings.get(w, [])
            idf = math.log(1 + (len(docs) - len(ds) + 0.5) / (len(ds) + 0.5))
            for d in ds:
                tf = toks[d][w]
                scores[d] += idf * tf / (tf + k1 * (1 - b + b * lengths[d] / avg))
        return [d for d, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))]

    return search


def test_every_judged_query_has_a_relevant_document_in_its_index(written) -> None:
    root, _ = written
    checked = 0
    for cid, entry, topics, grades, docs in _ranked_sets(root):
        assert grades, cid
        for q, dg in grades.items():
            assert q in topics, f"{cid}: judged query {q} is not a topic"
            assert any(g >= 1 and d in docs for d, g in dg.items()), f"{cid} {q}: no relevant document in the index"
            assert all(d in docs for d in dg), f"{cid} {q}: a judged document is not in the index"
            checked += 1
        top = max(g for dg in grades.values() for g in dg.values())
        if cid in DL_FILES:
            assert top == 3 and all(max(dg.values()) >= 2 for dg in grades.values())
            assert set(DL_INDEX) >= {cid}
        elif cid != "msmarco-train":
            assert top in (1, 2), cid
    assert checked > 300


def test_dl_query_lists_are_judged_topics(written) -> None:
    root, _ = written
    lists = _catalogue()["query_lists"]
    for cid, (t, q) in DL_FILES.items():
        ids = QueryList(cid, sha256=lists[cid]["sha256"]).ids()
        topics, grades = read_topics(root / TOPICS / t), _grades(root / TOPICS / q)
        assert set(ids) <= set(topics) and set(ids) == set(grades), cid
        docs = _docs(root / "lucene" / DL_INDEX[cid] / "docs.jsonl")
        assert all(d in docs for dg in grades.values() for d in dg)


def test_bm25_ranks_the_judged_documents_first(written) -> None:
    """A plain BM25 (the catalogue's k1/b) over each collection retrieves every query's own documents,
    the best-graded first: what the Lucene first stage will see."""
    root, _ = written
    searchers: dict[int, object] = {}
    for cid, entry, topics, grades, docs in _ranked_sets(root):
        fs = entry["first_stage"]
        search = searchers.setdefault(id(docs), _bm25(docs, float(fs.get("k1", 0.9)), float(fs.get("b", 0.4))))
        for q, dg in grades.items():
            hits = search(topics[q])
            assert len(hits) >= SIZES["docs_per_query"], (cid, q)
            top = hits[: SIZES["docs_per_query"]]
            assert dg.get(top[0]) == max(dg.values()), (cid, q)
            assert {d for d, g in dg.items() if g >= 1} <= set(top), (cid, q)


def test_doc_ids_in_each_collections_style(written) -> None:
    root, report = written
    v1 = _docs(root / report["indexes"]["msmarco-v1-passage"]["path"])
    v2 = _docs(root / report["indexes"]["msmarco-v2-passage"]["path"])
    assert all(d.isdigit() and set(x) == {"id", "contents"} for d, x in v1.items())
    assert all(re.fullmatch(r"msmarco_passage_\d\d_\d+", d) for d in v2)
    scifact = _docs(root / report["indexes"]["beir-v1.0.0-scifact.flat"]["path"])
    for x in scifact.values():
        assert rerank.raw_text(json.dumps(x)) == f"{x['title']}\n{x['text']}"  # as pyserini's BEIR flat raw shows it


def test_msmarco_train_where_ir_datasets_caches_it(written) -> None:
    pytest.importorskip("ir_datasets")
    root, _ = written
    # ir_datasets fixes its home at import: ask a fresh interpreter.
    code = ("import json; from presdep.data import irds; t = irds.load_topics('msmarco-passage/train/judged'); "
            "q = irds.load_qrels('msmarco-passage/train/judged'); "
            "print(json.dumps({'topics': t, 'qrels': [list(r) for r in q.iter_rows()]}))")
    env = {**os.environ, "IR_DATASETS_HOME": str(root / "ir_datasets")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(got["topics"]) == SIZES["pool_rows"]
    v1 = _docs(root / "lucene" / "msmarco-v1-passage" / "docs.jsonl")
    assert {q for q, _, _ in got["qrels"]} == set(got["topics"])
    assert all(d in v1 and r == 1 for _, d, r in got["qrels"])
