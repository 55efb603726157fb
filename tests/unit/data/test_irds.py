"""ir_datasets source: offline through its file cache, checked against the BEIR folder readers.

ir_datasets fixes IR_DATASETS_HOME when it is imported, so each scenario runs in a
subprocess with its own cache folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("ir_datasets")

from presdep.data.beir import read_beir_qrels  # noqa: E402
from presdep.data.corpus import iter_corpus, read_queries  # noqa: E402
from presdep.data.irds import IrdsError, load_topics  # noqa: E402

REPO = Path(__file__).resolve().parents[3]

PROBE = r"""
import hashlib, json, sys
from presdep.data.irds import IrdsError, iter_docs, load_qrels, load_topics
irds_id = sys.argv[1]
try:
    topics = load_topics(irds_id)
    qrels = sorted(load_qrels(irds_id).iter_rows())
    h = hashlib.sha256()
    n = 0
    for d in iter_docs(irds_id.rsplit("/", 1)[0] if irds_id.endswith("/test") else irds_id):
        h.update(json.dumps([d.doc_id, d.title, d.text]).encode())
        n += 1
    print(json.dumps({"topics": topics, "qrels": qrels, "docs": n, "sha": h.hexdigest()}))
except IrdsError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def _probe(irds_id: str, home: Path) -> dict:
    env = dict(
        os.environ,
        IR_DATASETS_HOME=str(home),
        PYTHONPATH=str(REPO),
        # Any download attempt fails at once instead of waiting on the network.
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        http_proxy="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9",
        NO_PROXY="",
        no_proxy="",
    )
    proc = subprocess.run([sys.executable, "-c", PROBE, irds_id], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_unknown_id() -> None:
    with pytest.raises(IrdsError, match="unknown ir_datasets id 'no-such/collection'"):
        load_topics("no-such/collection")


def test_download_failure_is_explained(tmp_path: Path) -> None:
    result = _probe("beir/scifact/test", tmp_path / "empty-cache")
    assert "error" in result, result
    msg = result["error"]
    assert "'beir/scifact/test'" in msg and "IR_DATASETS_HOME" in msg and str(tmp_path / "empty-cache") in msg


def test_scifact_from_local_files_matches_beir_reader(shared_data: Path, tmp_path: Path) -> None:
    """Place the BEIR files where ir_datasets caches beir/scifact's download and load it offline."""
    src = shared_data / "beir-scifact"
    home = tmp_path / "irds"
    (home / "beir" / "scifact").mkdir(parents=True)
    import gzip

    with zipfile.ZipFile(home / "beir" / "scifact" / "source.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        with gzip.open(src / "corpus.jsonl.gz", "rb") as fh:
            zf.writestr("scifact/corpus.jsonl", fh.read())
        zf.write(src / "queries.jsonl", "scifact/queries.jsonl")
        zf.write(src / "qrels" / "test.tsv", "scifact/qrels/test.tsv")
        # ir_datasets registers beir/scifact/train too; an empty file keeps the archive complete
        zf.writestr("scifact/qrels/train.tsv", "query-id\tcorpus-id\tscore\n")

    result = _probe("beir/scifact/test", home)
    assert "error" not in result, result

    # the same collection through presdep's own BEIR readers
    assert result["topics"] == read_queries(src, "beir")
    assert [tuple(r) for r in result["qrels"]] == sorted(read_beir_qrels(src).iter_rows())
    h = hashlib.sha256()
    n = 0
    for d in iter_corpus(src, "beir"):
        h.update(json.dumps([d.doc_id, d.title, d.text]).encode())
        n += 1
    assert result["docs"] == n == 5183
    assert result["sha"] == h.hexdigest()


def test_catalogue_ir_datasets_alternatives_resolve() -> None:
    """Every ir_datasets alternative the catalogue names is a registered ir_datasets id."""
    import ir_datasets

    from presdep.config.catalogue import load_catalogue

    cat = load_catalogue()
    alternatives = [(name, e["source"]["alternative"]) for name, e in cat["datasets"].items()
                    if (e["source"].get("alternative") or {}).get("kind") == "irds"]
    assert len(alternatives) >= 14
    for name, alt in alternatives:
        for irds_id in (alt["id"], alt["corpus"]):
            assert irds_id in ir_datasets.registry, f"{name}: {irds_id}"

