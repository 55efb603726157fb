"""What the catalogue says of each entry's geometry, checked against what a fetch of the rehearsal's
originals returns: questions, candidates per query, paragraphs per question, and the files read.

One test per source kind the rehearsal serves without a Lucene index: local rank_llm candidates,
local BEIR folders, QA sets (Hugging Face rows and release zips), response sets (Hugging Face rows
and RM-Bench's release file). Release files are downloaded from the rehearsal's own file server on
loopback, with the URL and sha256 overridden as the rehearsal's pins override them; the pyserini
prebuilt sources need an index and are covered by the rehearsal's workflow run.
"""

from __future__ import annotations

import functools
import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest

from presdep.config.catalogue import expand_catalogue, load_catalogue
from presdep.config.catalogue_overrides import with_overrides
from presdep.data.fetch.run import fetch
from presdep.data.hotpotqa import read_hotpotqa_ircot
from presdep.rehearsal import files_server
from presdep.rehearsal.originals import write_originals
from presdep.runtime.hashing import sha256_file

QUERIES = 3
CATALOGUE = load_catalogue()


def _depth(kind: str) -> int:
    """The one candidates-per-query figure of a kind's entries (the rehearsal writes that many)."""
    depths = {e["sizes"]["depth"] for e in CATALOGUE["datasets"].values() if e["task"] == kind}
    return max(depths)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("originals")
    return root, write_originals(root, queries=QUERIES, docs_per_query=_depth("rerank"), pool_rows=6)


@pytest.fixture(scope="module")
def served(written):
    """The rehearsal's file server (its handler), on an ephemeral loopback port, over ``files/``."""
    root, _ = written
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(files_server._Files, directory=str(root / "files")))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


def _ids(task: str, kind: str | None = None, section: str = "datasets") -> list[str]:
    return [cid for cid, e in CATALOGUE[section].items()
            if e["task"] == task and (kind is None or e["source"]["kind"] == kind)]


def _entry(cid: str, served: str | None, root: Path, **resize) -> dict:
    """The catalogue entry, its release URL moved to the loopback server (as the rehearsal's pins do)."""
    section = "datasets" if cid in CATALOGUE["datasets"] else "training_pools"
    source = CATALOGUE[section][cid]["source"]
    change = dict(resize)
    if source["kind"] == "url":
        name = source.get("filename") or source["url"].split("?")[0].split("/")[-1]
        change["source"] = {"url": f"{served}/{name}", "sha256": sha256_file(root / "files" / name)}
    return with_overrides(CATALOGUE, {cid: change} if change else {})[section][cid]


def _hub_rows(root: Path, report: dict, cid: str, section: str = "datasets") -> dict:
    return {"path": str(root / report[section][cid]["files"]["data"])}


# --------------------------------------------------------------------------- reranking


@pytest.mark.parametrize("cid", [c for c in _ids("rerank", "user_supplied")
                                 if "candidates" in CATALOGUE["datasets"][c]["source"]["local"]])
def test_rank_llm_candidates_have_the_catalogues_depth(written, tmp_path: Path, cid: str) -> None:
    root, report = written
    entry = CATALOGUE["datasets"][cid]
    files = report["datasets"][cid]["files"]
    local = {"candidates": str(root / files["candidates"]), "qrels": str(root / files["qrels"])}
    manifest = fetch(cid, entry, tmp_path, layout="ranked", local=local)
    depth = entry["sizes"]["depth"]
    assert depth == entry["first_stage"]["k"], f"{cid}: sizes.depth and the first stage's k disagree"
    assert manifest.rows["candidates_per_query"] == {"min": depth, "max": depth}
    assert manifest.rows["queries"] == QUERIES
    # Each file read is in the manifest with its own checksum; a local copy claims no URL.
    assert manifest.files == {p: {"sha256": sha256_file(p), "url": None} for p in local.values()}
    assert "url" not in manifest.source


@pytest.mark.parametrize("cid", [c for c in _ids("rerank", "user_supplied")
                                 if "beir" in CATALOGUE["datasets"][c]["source"]["local"]])
def test_beir_folders_give_the_catalogues_files_and_depth(written, tmp_path: Path, cid: str) -> None:
    root, report = written
    folder = root / report["datasets"][cid]["files"]["beir"]
    entry = CATALOGUE["datasets"][cid]
    manifest = fetch(cid, entry, tmp_path, layout="beir", local={"beir": str(folder)})
    assert manifest.rows["queries"] == QUERIES == report["datasets"][cid]["rows"]["queries"]
    assert sorted(Path(p).relative_to(folder).as_posix() for p in manifest.files) == [
        "corpus.jsonl", "qrels/test.tsv", "queries.jsonl"]
    assert all(f["sha256"] == sha256_file(p) for p, f in manifest.files.items())
    # The candidates per query come from our own BM25 over the copied folder: the catalogue's depth.
    expanded = expand_catalogue({"datasets": {cid: {"from_catalogue": True, "local_path": str(folder)}}})
    assert expanded["datasets"][cid]["candidates"]["k"] == entry["sizes"]["depth"] == entry["first_stage"]["k"]


# --------------------------------------------------------------------------- QA


def _qa_local(cid: str, root: Path, report: dict, section: str = "datasets") -> dict | None:
    return _hub_rows(root, report, cid, section) if report[section][cid]["kind"] == "hf_datasets" else None


@pytest.mark.parametrize("cid", _ids("qa"))
def test_qa_sets_have_the_catalogues_questions_and_paragraphs(written, served, tmp_path: Path, cid: str) -> None:
    root, report = written
    entry = _entry(cid, served, root)
    sel, sizes = entry["selection"], entry["sizes"]
    manifest = fetch(cid, entry, tmp_path / "out", layout="qa", local=_qa_local(cid, root, report),
                     download_dir=tmp_path / "downloads")
    assert manifest.rows["questions"] == min(sel["questions"], report["datasets"][cid]["rows"]["rows"])
    # selection.paragraphs is a cap ("up to"), the figure sizes.depth prices by and the entry's name states.
    assert sizes["depth"] == sel["paragraphs"] and f"up to {sel['paragraphs']} paragraphs" in entry["name"]
    per_q = manifest.rows["paragraphs_per_question"]
    assert per_q["max"] <= sel["paragraphs"] and per_q["min"] <= per_q["max"]
    qa_set = read_hotpotqa_ircot(tmp_path / "out" / "questions.jsonl")
    counts = qa_set.qrels.group_by("query_id").len()["len"].to_list()
    assert manifest.rows["paragraphs"] == sum(counts) and (min(counts), max(counts)) == (per_q["min"], per_q["max"])
    assert manifest.rows["fewer_paragraphs"] == sum(c < sel["paragraphs"] for c in counts)
    supporting = qa_set.qrels.group_by("query_id").agg(s=pl.col("relevance").sum())["s"].to_list()
    assert set(supporting) == {sel["supporting"]}
    if entry["source"]["kind"] == "url":  # the download's own URL and checksum
        assert manifest.files == {Path(entry["source"]["url"]).name: {"sha256": entry["source"]["sha256"],
                                                                      "url": entry["source"]["url"]}}


def test_qa_pool_splits_have_the_catalogues_paragraphs(written, tmp_path: Path) -> None:
    root, report = written
    [cid] = _ids("qa", section="training_pools")
    entry = _entry(cid, None, root, sampling={"n": 6, "heldout": 2})
    manifest = fetch(cid, entry, tmp_path, layout="pool_qa", local=_qa_local(cid, root, report, "training_pools"))
    for split in ("train", "heldout"):
        cap = entry["selection"]["paragraphs"]
        assert manifest.rows[split]["paragraphs_per_question"]["max"] == entry["sizes"]["depth"] == cap


# --------------------------------------------------------------------------- responses


def _per_prompt(entry: dict) -> int:
    return int(entry.get("responses_per_prompt", entry["sizes"]["depth"]))


@pytest.mark.parametrize("cid", _ids("response"))
def test_response_sets_have_the_catalogues_responses_per_prompt(written, served, tmp_path: Path, cid: str) -> None:
    root, report = written
    entry = _entry(cid, served, root)
    local = _hub_rows(root, report, cid) if entry["source"]["kind"] == "hf_datasets" else None
    manifest = fetch(cid, entry, tmp_path / "out", layout="ranked", local=local, download_dir=tmp_path / "downloads")
    depth = entry["sizes"]["depth"]
    assert depth == _per_prompt(entry), f"{cid}: sizes.depth and responses_per_prompt disagree"
    assert manifest.rows["candidates_per_query"] == {"min": depth, "max": depth}
    assert manifest.rows["queries"] == QUERIES
    if local is None:  # a release file: its own URL and checksum, and the catalogue's source as given
        url = entry["source"]["url"]
        assert manifest.files == {Path(url).name: {"sha256": entry["source"]["sha256"], "url": url}}
        assert manifest.source["url"] == url
    else:
        assert manifest.files == {local["path"]: {"sha256": sha256_file(local["path"]), "url": None}}
    written_manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert written_manifest["files"] == manifest.files and "published_files" not in written_manifest["source"]


def test_response_pool_splits_have_the_catalogues_responses_per_prompt(written, tmp_path: Path) -> None:
    root, report = written
    [cid] = _ids("response", section="training_pools")
    entry = _entry(cid, None, root, sampling={"n": 6, "heldout": 2, "dev": 1})
    manifest = fetch(cid, entry, tmp_path, layout="pool_ranked", local=_hub_rows(root, report, cid, "training_pools"))
    depth = entry["sizes"]["depth"]
    for split in ("train", "dev", "heldout"):
        assert manifest.rows[split]["candidates_per_query"] == {"min": depth, "max": depth}
