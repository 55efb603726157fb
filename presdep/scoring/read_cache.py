"""A content-addressed cache of model reads: each prompt's grade probabilities, read once.

An entry is one prompt's P(grade) per slot (float64, [slots, 4]), keyed by the exact
token ids and read positions; entries live in a folder per *identity*: the model (its
pinned source or the hash of its weights), the adapter's hash, the template's hash, the
dtype, the device type, the grade token ids and the torch / transformers versions. A
prompt that another variant, an earlier run or a killed job has read is never read again,
and a hit returns the stored float64 values, so scores built from it are bit-identical.

Storage: ``<root>/<identity key>/identity.json`` and Parquet shards (``key``, ``slots``,
``probs``). A shard is written to a temporary sibling and renamed into place, and its name
is the hash of the keys it holds, so two processes writing the same entries leave one
file and a reader never sees a torn shard. Several shards may hold one key (two jobs read
the same prompt at once): readers keep the first by shard name, every copy being a
complete read of that prompt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from presdep.schemas import atomic_write, write_text_atomic

log = logging.getLogger(__name__)

# Bump when the meaning of a stored read changes (it is part of every identity).
FORMAT_VERSION = 1
IDENTITY_FILE = "identity.json"
SHARD_SCHEMA = pa.schema([("key", pa.string()), ("slots", pa.int32()), ("probs", pa.list_(pa.float64()))])


def identity_key(identity: Mapping[str, Any]) -> str:
    """The folder name of an identity: sha256 of its canonical JSON."""
    text = json.dumps({"format": FORMAT_VERSION, **identity}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def entry_key(ids: Sequence[int], read_positions: Sequence[int]) -> str:
    """The key of one prompt: sha256 over its token ids and read positions (int64, little-endian)."""
    h = hashlib.sha256()
    h.update(np.asarray(ids, dtype="<i8").tobytes())
    h.update(b"|")
    h.update(np.asarray(read_positions, dtype="<i8").tobytes())
    return h.hexdigest()


def files_sha256(paths: Iterable[Path]) -> str:
    """One sha256 over several files' names and bytes (sorted by name)."""
    h = hashlib.sha256()
    for p in sorted(Path(x) for x in paths):
        h.update(p.name.encode("utf-8") + b"\x00")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def weights_sha256(model_dir: str | os.PathLike) -> str:
    """Hash of a model or adapter directory's weights and configs (what its reads depend on)."""
    d = Path(model_dir)
    files = [p for p in d.iterdir() if p.is_file() and (p.suffix in (".safetensors", ".bin", ".json", ".gguf"))]
    if not files:
        raise FileNotFoundError(f"read cache: no weight or config files in {d} to identify the model by")
    return files_sha256(files)


class ReadCache:
    """The entries of one identity under ``root``; ``get`` / ``put`` / ``flush``.

    ``refresh`` picks up shards that other jobs wrote since the last look (cheap: one
    directory listing), so concurrently running variants share each other's reads.
    """

    def __init__(self, root: str | os.PathLike, identity: Mapping[str, Any]):
        self.identity = json.loads(json.dumps(dict(identity), sort_keys=True, default=str))
        self.key = identity_key(self.identity)
        self.root = Path(root)
        self.dir = self.root / self.key
        self.dir.mkdir(parents=True, exist_ok=True)
        ident_file = self.dir / IDENTITY_FILE
        if not ident_file.exists():
            write_text_atomic(ident_file, json.dumps({"format": FORMAT_VERSION, **self.identity},
                                                     sort_keys=True, indent=1) + "\n")
        self._entries: dict[str, np.ndarray] = {}
        self._seen: set[str] = set()
        self._pending: dict[str, np.ndarray] = {}
        self._written: list[Path] = []
        self.hits = 0
        self.misses = 0
        self.refresh()

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
                table = pq.read_table(path, schema=SHARD_SCHEMA)
            except FileNotFoundError:  # merged into another shard meanwhile; the next refresh sees that one
                continue
            except (pa.ArrowInvalid, OSError) as exc:
                # Shards are renamed into place whole, so this is damage from outside: the
                # entries are read again, never trusted.
                log.warning("read cache: ignoring unreadable shard %s (%s)", path, exc)
                self._seen.add(path.name)
                continue
            self._seen.add(path.name)
            keys = table.column("key").to_pylist()
            slots = table.column("slots").to_pylist()
            probs = table.column("probs").to_pylist()
            for k, n, p in zip(keys, slots, probs):
                if k in self._entries:
                    continue
                arr = np.asarray(p, dtype=np.float64)
                if n is None or arr.size != 4 * n:
                    log.warning("read cache: %s entry %s has %s values for %s slots; ignored", path.name, k, arr.size, n)
                    continue
                self._entries[k] = arr.reshape(n, 4)
                new += 1
        return new

    def get(self, key: str) -> np.ndarray | None:
        hit = self._entries.get(key)
        if hit is None:
            hit = self._pending.get(key)
        return None if hit is None else hit.copy()

    def put(self, key: str, probs: np.ndarray) -> None:
        arr = np.asarray(probs, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != 4:
            raise ValueError(f"read cache: an entry is [slots, 4] grade probabilities, got shape {arr.shape}")
        if key not in self._entries:
            self._pending[key] = arr.copy()

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

    def _write_shard(self, entries: Mapping[str, np.ndarray]) -> Path:
        keys = sorted(entries)
        name = hashlib.sha256("\n".join(keys).encode("ascii")).hexdigest()[:40] + ".parquet"
        table = pa.table({
            "key": pa.array(keys, pa.string()),
            "slots": pa.array([entries[k].shape[0] for k in keys], pa.int32()),
            "probs": pa.array([entries[k].reshape(-1).tolist() for k in keys], pa.list_(pa.float64())),
        }, schema=SHARD_SCHEMA)
        return atomic_write(self.dir / name, lambda tmp: pq.write_table(table, tmp))

    def compact_written(self) -> Path | None:
        """Merge the shards this object wrote into one (written first, then the parts
        removed), so a job leaves one shard however often it flushed."""
        if len(self._written) < 2:
            return None
        merged: dict[str, np.ndarray] = {}
        parts = []
        for path in self._written:
            try:
                table = pq.read_table(path, schema=SHARD_SCHEMA)
            except FileNotFoundError:
                continue
            parts.append(path)
            for k, n, p in zip(table.column("key").to_pylist(), table.column("slots").to_pylist(),
                               table.column("probs").to_pylist()):
                merged.setdefault(k, np.asarray(p, dtype=np.float64).reshape(n, 4))
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


class Stopwatch:
    """Seconds spent inside ``with`` blocks, summed."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self):
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds += time.perf_counter() - self._t0
        return False


__all__ = ["FORMAT_VERSION", "ReadCache", "Stopwatch", "entry_key", "files_sha256", "identity_key", "weights_sha256"]
