"""A content-addressed store of model work: one value per exact input, written once.

The machinery shared by the read cache (a prompt's grade probabilities,
:mod:`presdep.scoring.read_cache`) and the answer cache (a reader prompt's greedy
continuation, :mod:`presdep.scoring.answer_cache`). Entries live in a folder per *identity*
(everything a value depends on besides its input: model, adapter, template, dtype,
library versions); the key of an entry is a hash of the exact input token ids.

Storage: ``<root>/<identity key>/identity.json`` and Parquet shards. A shard is written
to a temporary sibling and renamed into place, and its name is the hash of the keys it
holds, so two processes writing the same entries leave one file and a reader never sees a
torn shard. Several shards may hold one key (two jobs computed the same input at once):
readers keep the first by shard name, every copy being a complete value.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from presdep.contracts.schemas import atomic_write, write_text_atomic

log = logging.getLogger(__name__)

IDENTITY_FILE = "identity.json"


def identity_key(identity: Mapping[str, Any], format_version: int) -> str:
    """The folder name of an identity: sha256 of its canonical JSON."""
    text = json.dumps({"format": format_version, **identity}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ContentCache:
    """The entries of one identity under ``root``; ``get`` / ``put`` / ``flush``.

    ``refresh`` picks up shards that other jobs wrote since the last look (cheap: one
    directory listing), so concurrently running jobs share each other's work. A subclass
    gives the shard ``SCHEMA``, ``FORMAT_VERSION`` (part of every identity: bump it when
    the meaning of a stored value changes) and the three codec methods below.
    """

    SCHEMA: pa.Schema
    FORMAT_VERSION: int
    KIND = "cache"  # how log lines name it

    def __init__(self, root: str | os.PathLike, identity: Mapping[str, Any]):
        self.identity = json.loads(json.dumps(dict(identity), sort_keys=True, default=str))
        self.key = identity_key(self.identity, self.FORMAT_VERSION)
        self.root = Path(root)
        self.dir = self.root / self.key
        self.dir.mkdir(parents=True, exist_ok=True)
        ident_file = self.dir / IDENTITY_FILE
        if not ident_file.exists():
            write_text_atomic(ident_file, json.dumps({"format": self.FORMAT_VERSION, **self.identity},
                                                     sort_keys=True, indent=1) + "\n")
        self._entries: dict[str, Any] = {}
        self._seen: set[str] = set()
        self._pending: dict[str, Any] = {}
        self._written: list[Path] = []
        self.hits = 0
        self.misses = 0
        self.refresh()

    # -- codec -------------------------------------------------------------------------
    def _check(self, value: Any) -> Any:
        """The value to store (a private copy), or ValueError naming what was expected."""
        raise NotImplementedError

    def _decode(self, table: pa.Table, shard: str) -> Iterator[tuple[str, Any]]:
        """(key, value) pairs of a shard, skipping (with a warning) entries that do not parse."""
        raise NotImplementedError

    def _encode(self, keys: list[str], entries: Mapping[str, Any]) -> dict[str, pa.Array]:
        """The shard's columns besides ``key``, in ``keys`` order."""
        raise NotImplementedError

    def _copy(self, value: Any) -> Any:
        return value

    # -- store -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def shards(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("*.parquet") if not p.name.startswith("."))

    def refresh(self) -> int:
        """Load shards not seen yet; returns how many entries were new."""
        new = 0
        for path in self.shards():
            if path.name in self._seen:
                continue
            try:
                table = pq.read_table(path, schema=self.SCHEMA)
            except FileNotFoundError:  # merged into another shard meanwhile; the next refresh sees that one
                continue
            except (pa.ArrowInvalid, OSError) as exc:
                # Shards are renamed into place whole, so this is damage from outside: the
                # entries are computed again, never trusted.
                log.warning("%s: ignoring unreadable shard %s (%s)", self.KIND, path, exc)
                self._seen.add(path.name)
                continue
            self._seen.add(path.name)
            for k, value in self._decode(table, path.name):
                if k not in self._entries:
                    self._entries[k] = value
                    new += 1
        return new

    def lookup(self, keys: Sequence[str]) -> dict[str, Any]:
        """The stored values among ``keys`` (after picking up shards other jobs wrote
        meanwhile). Counts each distinct key not stored as a miss and every other key
        asked for as a hit (a repeat of a missing key is computed once, then reused)."""
        self.refresh()
        found: dict[str, Any] = {}
        missing = 0
        for k in dict.fromkeys(keys):
            value = self.get(k)
            if value is None:
                missing += 1
            else:
                found[k] = value
        self.misses += missing
        self.hits += len(keys) - missing
        return found

    def get(self, key: str) -> Any | None:
        hit = self._entries.get(key)
        if hit is None:
            hit = self._pending.get(key)
        return None if hit is None else self._copy(hit)

    def put(self, key: str, value: Any) -> None:
        value = self._check(value)
        if key not in self._entries:
            self._pending[key] = value

    def flush(self) -> Path | None:
        """Write the pending entries as one shard (atomically); entries another job wrote
        meanwhile are left out. Returns the shard's path, or None when nothing was new."""
        self.refresh()
        todo = {k: v for k, v in self._pending.items() if k not in self._entries}
        self._pending.clear()
        if not todo:
            return None
        path = self._write_shard(todo)
        self._entries.update(todo)
        self._seen.add(path.name)
        self._written.append(path)
        return path

    def _write_shard(self, entries: Mapping[str, Any]) -> Path:
        keys = sorted(entries)
        name = hashlib.sha256("\n".join(keys).encode("ascii")).hexdigest()[:40] + ".parquet"
        table = pa.table({"key": pa.array(keys, pa.string()), **self._encode(keys, entries)}, schema=self.SCHEMA)
        return atomic_write(self.dir / name, lambda tmp: pq.write_table(table, tmp))

    def compact_written(self) -> Path | None:
        """Merge the shards this object wrote into one (written first, then the parts
        removed), so a job leaves one shard however often it flushed."""
        if len(self._written) < 2:
            return None
        merged: dict[str, Any] = {}
        parts = []
        for path in self._written:
            try:
                table = pq.read_table(path, schema=self.SCHEMA)
            except FileNotFoundError:
                continue
            parts.append(path)
            for k, value in self._decode(table, path.name):
                merged.setdefault(k, value)
        out = self._write_shard(merged)
        for path in parts:
            if path != out:
                path.unlink(missing_ok=True)
        self._seen.add(out.name)
        self._written = [out]
        return out

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {"dir": str(self.root), "identity_key": self.key, "hits": self.hits, "misses": self.misses,
                "hit_rate": (self.hits / total) if total else None}


__all__ = ["ContentCache", "IDENTITY_FILE", "identity_key"]
