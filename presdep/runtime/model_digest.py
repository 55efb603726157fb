"""A model folder named by its content: one sha256 over every file its reads depend on.

Weights, configs, tokenizer files and chat template alike: a model replaced at the same
path gets another digest. Digesting a large model reads all of its bytes, so the digest can
be memoised in a small JSON file together with a stamp of the folder's files (relative name,
size, mtime, ctime, inode): while the stamp holds, no byte is read again. Writing a file
changes its ctime (which no tool can set back), and a replaced file is another inode, so a
stale memo is never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from presdep.contracts.atomic_files import write_text_atomic
from presdep.runtime.hashing import update_from_file
from presdep.runtime.models import MODEL_MANIFEST


def content_files(model_dir: str | os.PathLike) -> list[Path]:
    """Every regular file under ``model_dir``, in name order, skipping hidden names (a hub
    download's ``.cache/``, the tokenizer check record), which never change a read."""
    root = Path(model_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"model folder {root} does not exist (or is not a folder)")
    files = [p for p in root.rglob("*")
             if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    if not files:
        raise FileNotFoundError(f"no files in {root} to identify the model by")
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def files_stamp(model_dir: str | os.PathLike) -> list[list]:
    """(relative name, size, mtime_ns, ctime_ns, inode) of each content file: cheap, and it
    changes whenever a file is written or replaced."""
    root = Path(model_dir)
    out = []
    for p in content_files(root):
        st = p.stat()
        out.append([p.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    return out


def folder_sha256(model_dir: str | os.PathLike) -> str:
    """sha256 over each content file's relative name and bytes (a moved folder keeps it)."""
    root = Path(model_dir)
    h = hashlib.sha256()
    for p in content_files(root):
        h.update(p.relative_to(root).as_posix().encode("utf-8") + b"\x00")
        update_from_file(h, p)
        h.update(b"\x00")
    return h.hexdigest()


def hub_commit(model_dir: str | os.PathLike) -> str | None:
    """The hub commit a fetched snapshot was read at (None for a folder of other origin)."""
    try:
        commit = json.loads((Path(model_dir) / MODEL_MANIFEST).read_text(encoding="utf-8")).get("commit")
    except (OSError, ValueError, AttributeError):
        return None
    return commit if isinstance(commit, str) else None


def model_digest(model_dir: str | os.PathLike, memo: str | os.PathLike | None = None) -> tuple[dict, dict]:
    """(identity, memo record) of a model folder: ``{"files_sha256", "hub_commit"}``.

    With ``memo`` (a file :func:`write_memo` wrote earlier), its digest is reused when the
    folder's stamp still matches; else every file is read. The stamp is taken before the read,
    so a file changed during the read leaves a memo that no later run trusts.
    """
    folder = str(Path(model_dir).resolve())
    stamp = files_stamp(model_dir)
    known = _read_memo(memo) if memo is not None else None
    if known is not None and known.get("folder") == folder and known.get("stamp") == stamp:
        digest = known["files_sha256"]
    else:
        digest = folder_sha256(model_dir)
    record = {"folder": folder, "stamp": stamp, "files_sha256": digest}
    return {"files_sha256": digest, "hub_commit": hub_commit(model_dir)}, record


def write_memo(memo: str | os.PathLike, digest_memo: dict) -> None:
    write_text_atomic(memo, json.dumps(digest_memo, sort_keys=True))


def _read_memo(memo: str | os.PathLike) -> dict | None:
    try:
        record = json.loads(Path(memo).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # absent or damaged: digest the files
    ok = isinstance(record, dict) and isinstance(record.get("files_sha256"), str)
    return record if ok else None


__all__ = ["content_files", "files_stamp", "folder_sha256", "hub_commit", "model_digest", "write_memo"]
