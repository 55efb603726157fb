"""Build the rehearsal's sources: hub repositories, served files, client caches, and the pins.

    presdep rehearsal build            (make rehearsal does it first)

Everything lives under one folder (``resources/rehearsal`` by default):

- ``originals/``   synthetic files in each source's published format (presdep.rehearsal.originals)
- ``hub/``         git repositories the local hub serves: datasets, and one tiny random model per
                   ``models:`` entry of configs/paper.yaml under the real repository id
- ``files/``       what the file server serves: release files of ``url`` sources and the prebuilt
                   Lucene tarballs, named as pyserini names them
- ``home/``        the JVM's user.home, so Anserini finds the topics and qrels in its own cache
                   (``.cache/pyserini/topics-and-qrels``) and never touches the user's
- ``ir_datasets/`` IR_DATASETS_HOME, with MS MARCO's train queries and qrels where it caches them
- ``pins.yaml``    the third configfile: the commits, sha256 and md5 this build produced

The clients' own caches (HF_HOME, PYSERINI_CACHE) also live here (:func:`client_env`), so
the rehearsal's stand-ins can never be mistaken for the real files by a later real run.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from presdep.config.catalogue import load_catalogue
from presdep.config.yaml_io import load_yaml
from presdep.contracts.schemas import write_text_atomic
from presdep.rehearsal import git_repos, lucene_pack, originals, tiny_models
from presdep.rehearsal.servers import HOST, Ports
from presdep.runtime.hashing import sha256_file

log = logging.getLogger(__name__)

ROOT = Path("resources/rehearsal")
PAPER_CONFIG = Path("configs/paper.yaml")
PINS = "pins.yaml"


def client_env(root: Path = ROOT, ports: Ports = Ports()) -> dict[str, str]:
    """The environment the unmodified clients read: where the hub is, where each caches."""
    root = Path(root).resolve()
    return {
        "HF_ENDPOINT": f"http://{HOST}:{ports.hub}",
        "HF_HOME": str(root / "hf-home"),
        "HF_HUB_DISABLE_XET": "1",  # the local hub serves plain files, no Xet storage
        "PYSERINI_CACHE": str(root / "pyserini-cache"),
        "IR_DATASETS_HOME": str(root / "ir_datasets"),
        # Anserini caches topics and qrels under the JVM's user.home, which ignores $HOME.
        "JAVA_TOOL_OPTIONS": f"-Duser.home={root / 'home'}",
    }


def _sources(kind: str) -> list[tuple[str, dict]]:
    """(catalogue id, source) of every dataset and training pool whose source is of ``kind``."""
    cat = load_catalogue()
    return [(cid, e["source"]) for cid, e in {**cat["datasets"], **cat["training_pools"]}.items()
            if e["source"]["kind"] == kind]


def _verdict_sources() -> list[tuple[str, dict]]:
    """(catalogue id, verdict_labels) of every dataset whose claims' verdicts come from the hub."""
    return [(cid, e["verdict_labels"]) for cid, e in load_catalogue()["datasets"].items()
            if (e.get("verdict_labels") or {}).get("kind") == "hf_datasets"]


def _publish_datasets(root: Path, pins: dict) -> dict[str, str]:
    """Publish every hub dataset repo; pin each entry's source (and its verdict_labels) to the commit."""
    commits: dict[str, str] = {}

    def publish(repo_id: str) -> str:
        if repo_id not in commits:
            content = root / "originals" / "hub" / "datasets" / repo_id
            commits[repo_id] = git_repos.publish(content, root / "hub", "datasets", repo_id,
                                                 f"{repo_id}: synthetic rows in the published schema")
        return commits[repo_id]

    for cid, source in _sources("hf_datasets"):
        pins.setdefault(cid, {}).setdefault("source", {})["revision"] = publish(source["id"])
    for cid, labels in _verdict_sources():
        pins.setdefault(cid, {}).setdefault("verdict_labels", {})["revision"] = publish(labels["id"])
    return commits


def _publish_models(root: Path, paper_config: Path) -> dict[str, dict]:
    paper = load_yaml(paper_config)["models"]
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="presdep-tiny-") as work:
        for name, spec in paper.items():
            folder = tiny_models.build_repo(name, Path(work) / name)
            commit = git_repos.publish(folder, root / "hub", "models", spec["id"],
                                       f"{spec['id']}: a tiny random {tiny_models.PAPER_MODELS[name]} for the rehearsal")
            out[name] = {"id": spec["id"], "revision": commit}
    return out


def _serve_url_files(root: Path, ports: Ports, pins: dict) -> None:
    for cid, source in _sources("url"):
        name = source.get("filename") or source["url"].split("?")[0].rstrip("/").split("/")[-1]
        src = root / "originals" / "files" / name
        dest = root / "files" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        pins.setdefault(cid, {}).setdefault("source", {}).update(
            url=f"http://{HOST}:{ports.files}/{name}", sha256=sha256_file(dest))


def _serve_indexes(root: Path, ports: Ports, pins: dict, rebuild: bool) -> dict[str, dict]:
    packed: dict[str, dict] = {}
    record = root / "files" / "indexes.json"
    previous = json.loads(record.read_text()) if record.exists() and not rebuild else {}
    for cid, source in _sources("pyserini_prebuilt"):
        index = source["index"]
        if index not in packed:
            old = previous.get(index)
            if old and (root / "files" / old["file"]).exists():
                packed[index] = old  # a Lucene build is not byte-stable: keep the tarball pinned before
            else:
                packed[index] = lucene_pack.pack_prebuilt(index, root / "originals" / "lucene" / index, root / "files")
        info = packed[index]
        pins.setdefault(cid, {}).setdefault("source", {})["prebuilt_index"] = {
            "url": f"http://{HOST}:{ports.files}/{info['file']}", "md5": info["md5"], "size": info["size"]}
    write_text_atomic(record, json.dumps(packed, indent=2, sort_keys=True) + "\n")
    return packed


def _place_client_caches(root: Path) -> None:
    """Topics/qrels where Anserini caches them; MS MARCO train where ir_datasets caches it."""
    topics = root / "home" / ".cache" / "pyserini" / "topics-and-qrels"
    shutil.copytree(root / "originals" / "anserini" / "topics-and-qrels", topics, dirs_exist_ok=True)
    shutil.copytree(root / "originals" / "ir_datasets", root / "ir_datasets", dirs_exist_ok=True)


def build(root: Path = ROOT, ports: Ports = Ports(), *, paper_config: Path = PAPER_CONFIG,
          rebuild_indexes: bool = False, sizes: dict[str, Any] | None = None) -> dict:
    """Write every source and ``root/pins.yaml``; the pins as a dict."""
    root = Path(root)
    written = originals.write_originals(root / "originals", **(sizes or {}))
    overrides: dict[str, dict] = {}
    dataset_commits = _publish_datasets(root, overrides)
    models = _publish_models(root, Path(paper_config))
    _serve_url_files(root, ports, overrides)
    indexes = _serve_indexes(root, ports, overrides, rebuild_indexes)
    _place_client_caches(root)
    pins = {"catalogue_overrides": dict(sorted(overrides.items())),
            "models": {name: {"revision": m["revision"]} for name, m in models.items()}}
    header = ("# Written by `presdep rehearsal build` (do not edit by hand): the third configfile of the rehearsal,\n"
              "# after configs/paper.yaml and configs/rehearsal.yaml. The local hub's commits, the served files'\n"
              "# sha256 and the packed indexes' md5, so every fetch is pinned to what this build published.\n")
    write_text_atomic(root / PINS, header + yaml.safe_dump(pins, sort_keys=True))
    summary = {"datasets": dataset_commits, "models": models, "indexes": indexes, "originals": written}
    write_text_atomic(root / "build.json", json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return pins
