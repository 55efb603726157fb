"""The hosted grader's reply cache: one verified JSON file per request.

The key is a sha256 over the request's identity (normalised endpoint, request body,
attempt, template hash), and each entry stores that identity under ``request``. An
entry is written with a content digest over all of it, the request included
(:mod:`presdep.contracts.json_artifacts`), and used only when its digest matches, it has
the expected shape AND it answers exactly the request asked; anything else (torn,
non-UTF-8, a changed byte, wrong-shaped, swapped from another prompt) is named, renamed
aside (never deleted: it was paid for) and the request is asked again. Entries of an
older presdep (no digest) are used after their shape and request checks, with one
warning per cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Mapping

from presdep.contracts.errors import SchemaError
from presdep.contracts.json_artifacts import check_json_artifact, write_json_artifact
from presdep.training.hosted_net import scrub

log = logging.getLogger(__name__)


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def request_key(request: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(request).encode("ascii")).hexdigest()


def _shape_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return f"holds a JSON {type(entry).__name__}, expected an object"
    if not isinstance(entry.get("content"), (str, type(None))):
        return "'content' is not a string or null"
    for k in ("prompt_tokens", "completion_tokens"):
        v = entry.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return f"{k!r} is {v!r}, expected a non-negative integer"
    if not isinstance(entry.get("request"), dict):
        return "has no 'request' object (the request it answers)"
    return None


class ReplyCache:
    """``root/<key[:2]>/<key>.json``, written atomically; verified on every read."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.set_aside: list[str] = []  # paths renamed aside in this process
        self._lock = threading.Lock()
        self._warned_unverified = False

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str, request: Mapping[str, Any]) -> dict | None:
        """The entry answering ``request``, or None (absent, or set aside as unusable)."""
        p = self.path(key)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            return None
        try:
            entry, verified = check_json_artifact(raw)
        except SchemaError as exc:
            return self._aside(p, str(exc))
        if not verified and not self._warned_unverified:
            self._warned_unverified = True
            log.warning("hosted reply cache %s: entries without a content digest (written by an older presdep) "
                        "are used after their shape and request checks, unverified", scrub(self.root))
        problem = _shape_problem(entry)
        if problem:
            return self._aside(p, problem)
        if canonical(entry["request"]) != canonical(request):
            return self._aside(p, "answers another request than the one its name stands for")
        return entry

    def put(self, key: str, entry: Mapping[str, Any]) -> None:
        write_json_artifact(self.path(key), entry)

    def _aside(self, p: Path, why: str) -> None:
        with self._lock:
            n = 0
            while True:
                target = p.with_name(f"{p.name}.bad{n or ''}")
                if not target.exists():
                    break
                n += 1
            try:
                os.replace(p, target)
            except FileNotFoundError:  # another thread set it aside first
                return None
            self.set_aside.append(str(target))
        log.warning("hosted reply cache entry %s: %s: renamed to %s, the request is asked again",
                    scrub(p), why, target.name)
        return None


__all__ = ["ReplyCache", "request_key", "canonical"]
