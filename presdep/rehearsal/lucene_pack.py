"""Tiny Lucene indexes packed as pyserini packs its prebuilt ones, for pyserini's own download path.

pyserini downloads ``<stem>.tar.gz`` (its index table's file name), checks its size and md5,
and unpacks the one folder inside to ``<cache>/indexes/<stem>.<md5>``. The rehearsal builds the
index with pyserini's indexer over a small JsonCollection and packs it the same way; the
config's ``catalogue_overrides`` then point pyserini's table at the loopback copy.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
import tempfile
from pathlib import Path

from presdep.candidates.bm25 import run_indexer
from presdep.contracts.schemas import atomic_write
from presdep.runtime.java import MIN_JAVA, ensure_java


def prebuilt_filename(index: str) -> str:
    """The tarball name pyserini downloads for ``index`` (its table's filename, else the URL's)."""
    ensure_java(MIN_JAVA)
    from pyserini.prebuilt_index_info import TF_INDEX_INFO

    info = TF_INDEX_INFO[index]
    return info.get("filename") or info["urls"][0].split("/")[-1]


def md5_file(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pack_prebuilt(index: str, docs_dir: Path, out_dir: Path, threads: int = 1) -> dict:
    """Index ``docs_dir`` (JsonCollection) and write ``out_dir/<pyserini's file name>``: {file, md5, size}."""
    filename = prebuilt_filename(index)
    stem = re.sub(r"\.tar\.gz.*$", "", filename)
    java_home = ensure_java(MIN_JAVA)
    with tempfile.TemporaryDirectory(prefix="presdep-lucene-") as work:
        index_dir = Path(work) / stem
        run_indexer(Path(docs_dir), index_dir, threads, java_home)

        def pack(tmp: Path) -> None:
            with tarfile.open(tmp, "w:gz") as tar:
                tar.add(index_dir, arcname=stem)  # the folder first: pyserini renames the first folder it lists

        out = Path(out_dir) / filename
        atomic_write(out, pack)
    return {"file": filename, "md5": md5_file(out), "size": out.stat().st_size}
