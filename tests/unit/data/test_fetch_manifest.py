"""The fetch manifest names every file it read with that file's own URL and checksum, and a local copy
is converted into a folder keyed by its source, never into another source's."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fetch_helpers import SHARED_DATA, fetch_catalogue_entry, requires_file

from presdep.config import SCHEMA_PATH, load_workflow_config
from presdep.config.catalogue import fetch_jobs, fetch_key, load_catalogue, local_key
from presdep.data.fetch.run import fetch
from presdep.runtime.hashing import sha256_file

RM_BENCH = SHARED_DATA / "rm-bench"
PUBLISHED = "https://raw.githubusercontent.com/THU-KEG/RM-Bench/73c52d7b/data/"


def _rm_bench_file(path: Path, prompt_id: int = 1) -> Path:
    rows = [{"id": prompt_id, "prompt": "Say hi.", "chosen": ["hi", "Hi!", "**Hi**"], "rejected": ["no", "No!", "**No**"]}]
    path.write_text(json.dumps(rows, indent=4) + "\n", encoding="utf-8")
    return path


def _entry(published: dict) -> dict:
    return {"task": "response", "first_stage": {"kind": "none"},
            "source": {"kind": "url", "url": "https://example.org/data/chat.json", "sha256": "0" * 64,
                       "converter": "rm_bench_json", "local": {"path": "rm_bench_json"}, "published_files": published}}


@pytest.mark.parametrize("name", ["chat_filtered.json", "safety-response_filtered.json"])
@requires_file(RM_BENCH / "safety-response_filtered.json", "real RM-Bench")
def test_each_real_rm_bench_file_carries_its_own_url_and_checksum(tmp_path: Path, name: str) -> None:
    path = RM_BENCH / name
    manifest = fetch_catalogue_entry("rm-bench", path, tmp_path, layout="ranked")
    assert manifest.files == {str(path): {"sha256": sha256_file(path), "url": PUBLISHED + name}}
    # The catalogue's download URL (the chat file's) is not what a local copy was read from.
    assert "url" not in manifest.source and "sha256" not in manifest.source
    assert json.loads((tmp_path / "manifest.json").read_text())["files"] == manifest.files


def test_a_local_copy_is_matched_to_its_published_file_by_checksum(tmp_path: Path) -> None:
    ours = _rm_bench_file(tmp_path / "renamed.json")
    entry = _entry({"code.json": {"url": "https://example.org/data/code.json", "sha256": sha256_file(ours)}})
    manifest = fetch("rm-bench", entry, tmp_path / "out", layout="ranked", local={"path": str(ours)})
    assert manifest.files == {str(ours): {"sha256": sha256_file(ours), "url": "https://example.org/data/code.json"}}
    assert manifest.notes == []


def test_a_changed_copy_of_a_published_file_gets_no_url(tmp_path: Path, caplog) -> None:
    ours = _rm_bench_file(tmp_path / "code.json")
    entry = _entry({"code.json": {"url": "https://example.org/data/code.json", "sha256": "1" * 64}})
    with caplog.at_level(logging.WARNING):
        manifest = fetch("rm-bench", entry, tmp_path / "out", layout="ranked", local={"path": str(ours)})
    assert manifest.files[str(ours)]["url"] is None
    assert manifest.notes == [f"{ours}: not the published code.json (sha256 {sha256_file(ours)}, published {'1' * 64}); "
                              "no URL recorded"]
    assert any("named like the published code.json" in r.getMessage() for r in caplog.records)


def test_an_unpinned_published_file_is_recorded_unverified(tmp_path: Path) -> None:
    ours = _rm_bench_file(tmp_path / "math.json")
    entry = _entry({"math.json": {"url": "https://example.org/data/math.json", "sha256": None}})
    manifest = fetch("rm-bench", entry, tmp_path / "out", layout="ranked", local={"path": str(ours)})
    assert manifest.files[str(ours)]["url"] == "https://example.org/data/math.json"
    assert "not pinned; its URL is recorded unverified" in manifest.notes[0]


def test_the_catalogue_pins_each_rm_bench_file() -> None:
    source = load_catalogue()["datasets"]["rm-bench"]["source"]
    files = source["published_files"]
    assert {n: f["url"] for n, f in files.items()} == {n: PUBLISHED + n for n in files}
    assert files["chat_filtered.json"]["sha256"] == source["sha256"] and source["url"] == PUBLISHED + "chat_filtered.json"
    assert {"code_filtered.json", "safety-refuse_filtered.json", "safety-response_filtered.json"} <= set(files)


# --------------------------------------------------------------------------- keyed by source


def _config(datasets: dict) -> dict:
    return {"protocol": {}, "datasets": datasets, "variants": {"bm25": {"scorer": "identity"}}}


def test_different_local_files_get_different_folders(tmp_path: Path) -> None:
    a, b = _rm_bench_file(tmp_path / "a.json", 1), _rm_bench_file(tmp_path / "b.json", 22)
    paths = {}
    for f in (a, b):
        filled, _ = load_workflow_config(_config({"rm-bench": {"from_catalogue": True, "local_path": str(f)}}), SCHEMA_PATH)
        paths[f] = filled["datasets"]["rm-bench"]["candidates"]["path"]
    assert paths[a] != paths[b]
    assert paths[a] == f"resources/datasets/rm-bench/{local_key({'path': str(a)})}/candidates.json"
    # The same file named again is the same folder; the catalogue's own source keeps resources/datasets/<id>/.
    assert local_key({"path": str(a)}) == local_key({"path": str(a)})
    assert fetch_key("rm-bench", None) == "rm-bench"
    filled, _ = load_workflow_config(_config({"rm-bench": {"from_catalogue": True}}), SCHEMA_PATH)
    assert filled["datasets"]["rm-bench"]["candidates"]["path"] == "resources/datasets/rm-bench/candidates.json"


def test_one_config_may_give_one_entry_two_local_files(tmp_path: Path) -> None:
    a, b = _rm_bench_file(tmp_path / "chat.json", 1), _rm_bench_file(tmp_path / "safety.json", 22)
    _, cfg = load_workflow_config(_config({
        "rm-chat": {"from_catalogue": "rm-bench", "local_path": str(a)},
        "rm-safety": {"from_catalogue": "rm-bench", "local_path": str(b)}}), SCHEMA_PATH)
    jobs = fetch_jobs(cfg.datasets)
    assert set(jobs) == {fetch_key("rm-bench", {"path": str(a)}), fetch_key("rm-bench", {"path": str(b)})}
    assert {j["catalogue_id"] for j in jobs.values()} == {"rm-bench"}
    assert {j["local"]["path"] for j in jobs.values()} == {str(a), str(b)}


def test_the_fetch_key_names_the_id_and_the_folder_apart(tmp_path: Path) -> None:
    src = _rm_bench_file(tmp_path / "chat.json")
    key = fetch_key("rm-bench", {"path": str(src)})
    manifest = fetch(key, load_catalogue()["datasets"]["rm-bench"], tmp_path / "out", layout="ranked",
                     local={"path": str(src)})
    assert (manifest.catalogue_id, manifest.folder) == ("rm-bench", key.split("/")[1])
