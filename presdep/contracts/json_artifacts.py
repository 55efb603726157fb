"""JSON artifacts a later step reads: written with a digest, verified on every read.

The Parquet artifacts carry a content digest (:mod:`presdep.contracts.schemas`); the JSON
files the workflow passes from one rule to the next (the threshold t*, a training run's
``done.json``, the lambda selection ``selected.json``, the stability result, a BM25 index's
build record, the hosted teachers' cached replies) carry one too, so that a damaged or
hand-edited file is refused instead of read.

Layout: the document as canonical JSON (:func:`canonical_json`: sorted keys, ASCII only,
one-space indent, no NaN or infinity) with one more top-level field, ``presdep_sha256``,
the SHA-256 of the canonical bytes of the rest. A file is accepted only when its digest
matches AND its bytes are exactly the canonical form of what it holds, so every changed
byte is refused, whitespace included (there is no insignificant byte). A file without the
field (written by an older presdep) is read with one logged warning per file, as Parquet
files without digests are.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from presdep.contracts.errors import InvalidInput, SchemaError, cut
from presdep.contracts.schemas import REBUILD_HINT, write_bytes_atomic

log = logging.getLogger(__name__)

DIGEST_FIELD = "presdep_sha256"
_HEX64 = re.compile(r"[0-9a-f]{64}")
# What a refused file most likely went through; the message then says how to rebuild it.
CHANGED = "the file changed after presdep wrote it (damaged, or edited by hand)"

# Files already warned about for lacking a digest (one warning per file and process).
_WARNED_UNVERIFIED: set[str] = set()


def canonical_json(doc: Any) -> bytes:
    """The one byte form of a JSON document: sorted keys, ASCII (non-ASCII as \\u escapes),
    one-space indent, a final newline. Raises ValueError for NaN or infinity, TypeError for
    what JSON cannot hold."""
    text = json.dumps(doc, sort_keys=True, ensure_ascii=True, allow_nan=False, indent=1, separators=(",", ": "))
    return (text + "\n").encode("ascii")


def json_artifact_bytes(doc: Mapping[str, Any], *, default: Callable[[Any], Any] | None = None) -> bytes:
    """The bytes :func:`write_json_artifact` writes for ``doc`` (``default`` as in ``json.dumps``)."""
    if not isinstance(doc, Mapping):
        raise InvalidInput(f"a JSON artifact is an object (a mapping), got {type(doc).__name__}")
    if DIGEST_FIELD in doc:
        raise InvalidInput(f"a JSON artifact's own field {DIGEST_FIELD!r} is written by presdep, not given")
    try:
        # Through JSON once: tuples become lists, int keys strings, ``default`` applies; what
        # is digested is then exactly what a reader gets back.
        rest = json.loads(json.dumps(dict(doc), default=default, allow_nan=False, sort_keys=True))
        body = canonical_json(rest)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"a JSON artifact holds only JSON values (no NaN or infinity): {cut(str(exc))}") from exc
    return canonical_json({**rest, DIGEST_FIELD: hashlib.sha256(body).hexdigest()})


def write_json_artifact(path: str | os.PathLike, doc: Mapping[str, Any], *,
                        default: Callable[[Any], Any] | None = None) -> Path:
    """Write ``doc`` atomically as canonical JSON with its ``presdep_sha256`` digest."""
    return write_bytes_atomic(path, json_artifact_bytes(doc, default=default))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {cut(k)} appears twice")
        out[k] = v
    return out


def _near_digest_field(key: str) -> bool:
    """A key one character off the digest field's name: the field itself, damaged."""
    return len(key) == len(DIGEST_FIELD) and sum(a != b for a, b in zip(key, DIGEST_FIELD)) == 1


def check_json_artifact(data: bytes) -> tuple[dict[str, Any], bool]:
    """``(document without its digest, whether it carried one)`` from a JSON artifact's bytes.

    Raises :class:`SchemaError` whose message is the reason alone (callers add the file): not
    UTF-8, not JSON, not an object, a key given twice, a digest field that is not a SHA-256 or
    does not match, bytes that are not the canonical form of the document.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(f"not UTF-8 text (byte {exc.start}): {CHANGED}") from None
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {CHANGED}") from None
    except (ValueError, RecursionError) as exc:
        raise SchemaError(f"not valid JSON ({cut(str(exc))}): {CHANGED}") from None
    if not isinstance(doc, dict):
        raise SchemaError(f"holds a JSON {type(doc).__name__}, expected an object")
    if DIGEST_FIELD not in doc:
        near = [k for k in doc if _near_digest_field(k)]
        if near:
            raise SchemaError(f"its digest field is named {cut(near[0])}, not {DIGEST_FIELD!r}: {CHANGED}")
        return doc, False
    stored = doc.pop(DIGEST_FIELD)
    if not isinstance(stored, str) or not _HEX64.fullmatch(stored):
        raise SchemaError(f"its {DIGEST_FIELD} is {cut(stored)}, not a SHA-256 in hex: {CHANGED}")
    try:
        body = canonical_json(doc)
    except (TypeError, ValueError):  # a number JSON cannot hold (1e999 reads as infinity)
        raise SchemaError(f"holds a number out of range: {CHANGED}") from None
    if hashlib.sha256(body).hexdigest() != stored:
        raise SchemaError(f"content digest mismatch: {CHANGED}")
    if canonical_json({**doc, DIGEST_FIELD: stored}) != data:
        raise SchemaError(f"its bytes are not the form presdep writes (same content, other bytes): {CHANGED}")
    return doc, True


def read_json_artifact(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """Read and verify the JSON artifact at ``path`` (``what``: how messages name it, e.g.
    ``"threshold file"``), without its digest field.

    A missing file raises FileNotFoundError; a refused one a :class:`SchemaError` naming the
    file, ``what``, the reason and how to rebuild it. A file without a digest is read with one
    logged warning.
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        doc, verified = check_json_artifact(data)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {what}: {exc}; {REBUILD_HINT}") from None
    if not verified and str(path) not in _WARNED_UNVERIFIED:
        _WARNED_UNVERIFIED.add(str(path))
        log.warning("%s: %s without a presdep content digest (written by an older presdep or by hand): read "
                    "without verifying it; re-run the rule that wrote it to add one", path, what)
    return doc


__all__ = ["CHANGED", "DIGEST_FIELD", "canonical_json", "check_json_artifact", "json_artifact_bytes",
           "read_json_artifact", "write_json_artifact"]
