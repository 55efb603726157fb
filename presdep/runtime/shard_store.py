"""The shard store under a content cache: verified Parquet shards of one identity's entries.

:class:`ShardStore` keeps the entries of one *identity* (everything a value depends on
besides its input) in a folder of its own and reads back only what provably is the value
written; :class:`presdep.runtime.content_cache.ContentCache` adds the claims that keep
concurrent jobs from computing one entry twice.

Storage: ``<root>/<identity key>/identity.json`` and Parquet shards. A shard is written
to a temporary sibling and renamed into place, and its name is the hash of its identity and
the keys it holds, so two processes writing the same entries leave one file, a reader never
sees a torn shard, and a shard copied in from another identity's folder does not replace
this identity's own shard of the same keys. Several shards may hold one key: readers keep
the first by shard name, every copy being a complete value.

Layout: while a job runs, each flush writes a *part* (``part-<hash>.parquet``), so that
concurrent jobs and a killed job's next run find its reads at once. At its end the job
writes its *job shard* (:meth:`ShardStore.write_job_shard`): every entry it used, whether
it computed it, found it stored or waited for another job's, and removes the parts that
shard covers. Which job computed a shared entry depends on timing; which entries a job
uses does not, so a finished run leaves the same shard files whatever the order its jobs
ran in, how many ran at once, or whether one was killed and resumed (a resumed job counts
the entries of the work it had finished through the journal its resume folder keeps:
:meth:`ShardStore.keep_journal`).

Integrity: the cache is shared by every later run, so a value read back is served only
when it provably is the value written, under this identity. Every entry carries a
``sha256`` column, the digest of the identity key, the entry's key and a canonical encoding
of its value (:func:`entry_checksum`; each cache says what its canonical bytes are), every
shard names the identity key it was written under in its Parquet key-value metadata
(``presdep_cache_identity``), and shards are written with Parquet page checksums (CRC32,
verified on read). A shard is loaded whole or not at all: one that cannot be read (a page
checksum, the footer, the schema), or that was written under another identity (copied
from another identity's folder: the warning names both), or that holds an entry whose
checksum does not match or whose value the cache refuses (:meth:`ShardStore._validate`),
or whose name is not the hash of its identity and keys (a row lost or added), is reported
(one warning naming the shard, its entry count and the reason), moved to
``<identity dir>/quarantine/`` so that no later run reads it, and counted in
:meth:`ShardStore.stats`. Its entries are then simply missing: a lookup misses them and
the caller computes them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from presdep.contracts.errors import cut
from presdep.contracts.schemas import atomic_write, write_text_atomic

# The content cache's logger: callers configure and filter a refused shard's warning under that name.
log = logging.getLogger("presdep.runtime.content_cache")

IDENTITY_FILE = "identity.json"
QUARANTINE_DIR = "quarantine"  # under the identity folder: shards found corrupt, never read again
CHECKSUM_COLUMN = "sha256"
CHECKSUM_TYPE = pa.binary(32)
IDENTITY_META = b"presdep_cache_identity"  # a shard's key-value metadata: the identity key it was written under
PART_PREFIX = "part-"  # a shard a running job flushed; its job shard replaces it (module docstring)
JOURNAL_PREFIX = "cache-keys-"  # in a job's resume folder: the keys its finished work used


def identity_key(identity: Mapping[str, Any], format_version: int) -> str:
    """The folder name of an identity: sha256 of its canonical JSON."""
    text = json.dumps({"format": format_version, **identity}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def shard_schema(*value_fields: tuple[str, pa.DataType]) -> pa.Schema:
    """A shard's schema: ``key`` (string), the cache's value columns, then ``sha256`` (32 bytes)."""
    return pa.schema([("key", pa.string()), *value_fields, (CHECKSUM_COLUMN, CHECKSUM_TYPE)])


def entry_checksum(identity: str, key: str, canonical: bytes) -> bytes:
    """The stored checksum of one entry: sha256 over the identity key (:func:`identity_key`,
    its 32 bytes), the key's UTF-8 length (uint64, little-endian), the key, and the value's
    canonical bytes. The identity in it: a value is only ever served under the identity it
    was computed for."""
    kb = key.encode("utf-8")
    h = hashlib.sha256()
    h.update(bytes.fromhex(identity))
    h.update(len(kb).to_bytes(8, "little"))
    h.update(kb)
    h.update(canonical)
    return h.digest()


def shard_name(identity: str, keys: Sequence[str], *, part: bool = False) -> str:
    """A shard's file name: the hash of its identity key and its (sorted) keys; a part's
    name has :data:`PART_PREFIX` before it."""
    digest = hashlib.sha256("\n".join([identity, *sorted(keys)]).encode("utf-8")).hexdigest()[:40]
    return (PART_PREFIX if part else "") + digest + ".parquet"


class ShardStore:
    """The entries of one identity under ``root``; ``get`` / ``put`` / ``flush``.

    ``refresh`` picks up shards that other jobs wrote since the last look (cheap: one
    directory listing), so concurrently running jobs share each other's work. A subclass
    gives the shard ``SCHEMA`` (:func:`shard_schema`), ``FORMAT_VERSION`` (part of every
    identity: bump it when the meaning or the layout of a stored value changes) and the
    codec methods below. Shards that fail verification are quarantined (see the module
    docstring); ``quarantined_shards`` / ``quarantined_entries`` count those this object
    found.
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
        self._parts: dict[str, frozenset[str]] = {}  # part shard name -> its keys (loaded or written here)
        self._used: dict[str, None] = {}  # keys whose values this job used, in first-use order
        self._journal: Path | None = None  # where checkpoint() records them (keep_journal)
        self._unjournaled: list[str] = []  # keys first used since the last checkpoint
        self._journal_files = 0  # journal files in that folder
        self.hits = 0
        self.misses = 0
        self.quarantined_shards = 0
        self.quarantined_entries = 0  # rows of those shards (where the footer still said how many)
        self.refresh()

    # -- codec -------------------------------------------------------------------------
    def _check(self, value: Any) -> Any:
        """The value to store (a private copy), or ValueError naming what was expected."""
        raise NotImplementedError

    def _decode(self, table: pa.Table) -> Iterator[tuple[Any, str | None]]:
        """One ``(value, None)`` per row of a shard, in row order, or ``(None, reason)`` for a
        row that does not parse."""
        raise NotImplementedError

    def _encode(self, keys: list[str], entries: Mapping[str, Any]) -> dict[str, pa.Array]:
        """The shard's value columns (besides ``key`` and ``sha256``), in ``keys`` order."""
        raise NotImplementedError

    def _canonical(self, value: Any) -> bytes:
        """The bytes a value's checksum covers: equal for equal values, and any change of
        the value read back (shape, bits) changes them."""
        raise NotImplementedError

    def _validate(self, value: Any) -> str | None:
        """Why a value read back is refused even with a matching checksum, or None."""
        return None

    def _copy(self, value: Any) -> Any:
        return value

    # -- store -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def shards(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("*.parquet") if not p.name.startswith("."))

    def refresh(self) -> int:
        """Load shards not seen yet; returns how many entries were new. A shard that fails
        verification is quarantined and contributes nothing."""
        new = 0
        for path in self.shards():
            if path.name in self._seen:
                continue
            loaded = self._load(path)
            if loaded is None:
                continue
            self._seen.add(path.name)
            if path.name.startswith(PART_PREFIX):
                self._parts[path.name] = frozenset(loaded)
            for k, value in loaded.items():
                if k not in self._entries:
                    self._entries[k] = value
                    new += 1
        return new

    def _load(self, path: Path) -> dict[str, Any] | None:
        """The verified entries of one shard, or None: it vanished (merged into another
        shard meanwhile; the next refresh sees that one) or it was quarantined."""
        try:
            before = os.stat(path)
            # One open, by path: the footer's identity and the rows come from one file. (A Python file
            # object here would have Arrow's reader threads call back into Python, which could abort
            # the interpreter at exit.)
            with pq.ParquetFile(path, page_checksum_verification=True) as pf:
                writer = (pf.metadata.metadata or {}).get(IDENTITY_META)
                table = pf.read().select(self.SCHEMA.names).cast(self.SCHEMA)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - whatever the damage, the shard is not trusted
            # Shards are renamed into place whole, so this is damage from outside.
            self._quarantine(path, f"unreadable ({type(exc).__name__}: {_short(exc)})", None, before)
            return None
        try:
            entries, problem = self._verify(table, path.name, writer)
        except Exception as exc:  # noqa: BLE001 - a value column that does not even decode
            entries, problem = {}, f"undecodable ({type(exc).__name__}: {_short(exc)})"
        if problem is not None:
            self._quarantine(path, problem, table.num_rows, before)
            return None
        return entries

    def _verify(self, table: pa.Table, name: str, writer: bytes | None) -> tuple[dict[str, Any], str | None]:
        """(entries, None) when every row of a shard (written under identity ``writer``)
        checks out, else ({}, the reason)."""
        if writer != self.key.encode("ascii"):
            # Checked first so that the warning names both identities; the checksums (which
            # cover the identity) refuse such a shard even if its metadata were rewritten.
            theirs = "no identity" if writer is None else f"identity {cut(writer.decode('utf-8', 'replace'))}"
            return {}, (f"written under {theirs}, not this folder's identity {self.key!r} (copied from another "
                        "identity's folder?): its values are not this identity's")
        keys = table.column("key").to_pylist()
        digests = table.column(CHECKSUM_COLUMN).to_pylist()
        values = list(self._decode(table))
        if len(values) != len(keys):
            return {}, f"{len(values)} values for {len(keys)} keys"
        entries: dict[str, Any] = {}
        bad: list[str] = []
        for k, digest, (value, why) in zip(keys, digests, values):
            if why is None:
                if not isinstance(k, str):
                    why = "no key"
                elif k in entries:
                    why = "stored twice"
                elif not isinstance(digest, bytes) or len(digest) != 32:
                    why = "no checksum"
                elif digest != entry_checksum(self.key, k, self._canonical(value)):
                    why = "checksum mismatch"
                else:
                    why = self._validate(value)
            if why is None:
                entries[k] = value
            else:
                bad.append(f"entry {str(k)[:16]}: {why}")
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            return {}, f"{len(bad)} of {len(keys)} entries refused; {bad[0]}{more}"
        if shard_name(self.key, list(entries), part=name.startswith(PART_PREFIX)) != name:
            return {}, "its name is not the hash of its identity and keys (a row lost or added)"
        return entries, None

    def _quarantine(self, path: Path, reason: str, rows: int | None, before: os.stat_result | None) -> None:
        """Move a refused shard to ``quarantine/`` (keeping every earlier one) and say so."""
        if rows is None:
            try:
                rows = pq.read_metadata(path).num_rows
            except Exception:  # noqa: BLE001 - the footer is damaged too
                rows = None
        qdir = self.dir / QUARANTINE_DIR
        dest = qdir / path.name
        n = 1
        while dest.exists():
            dest = qdir / f"{path.name}.{n}"
            n += 1
        entries = "?" if rows is None else str(rows)
        try:
            now = os.stat(path)
            if before is not None and (now.st_ino, now.st_size, now.st_mtime_ns) != (
                    before.st_ino, before.st_size, before.st_mtime_ns):
                # Replaced meanwhile (the same entries written again): the next refresh reads the new file.
                log.warning("%s: shard %s refused (%s entries; %s) but was replaced meanwhile; "
                            "reading it again", self.KIND, path, entries, reason)
                self._seen.discard(path.name)
                return
            qdir.mkdir(exist_ok=True)
            os.replace(path, dest)
        except FileNotFoundError:
            # Another reader quarantined it (or a compaction removed it) first.
            self._seen.discard(path.name)
        except OSError as exc:
            log.warning("%s: refused shard %s (%s entries; %s) could not be moved to %s (%s); ignoring it",
                        self.KIND, path, entries, reason, qdir, exc)
            self._seen.add(path.name)  # not read again by this object
        else:
            self._seen.discard(path.name)  # a fresh shard of that name is read again
            log.warning("%s: refused shard %s (%s entries; %s): moved to %s, its entries will be computed "
                        "again", self.KIND, path, entries, reason, dest.relative_to(self.dir))
        self.quarantined_shards += 1
        self.quarantined_entries += rows or 0

    def lookup(self, keys: Sequence[str]) -> dict[str, Any]:
        """The stored values among ``keys`` (after picking up shards other jobs wrote
        meanwhile). Counts each distinct key not stored as a miss and every other key
        asked for as a hit (a repeat of a missing key is computed once, then reused).
        Entries of a quarantined shard are misses: the caller computes them again."""
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
        """The value stored (or put) under ``key``, a copy, or None; a value returned counts as
        used by this job (its job shard holds it)."""
        hit = self._entries.get(key)
        if hit is None:
            hit = self._pending.get(key)
        if hit is None:
            return None
        self._use(key)
        return self._copy(hit)

    def put(self, key: str, value: Any) -> None:
        value = self._check(value)
        self._use(key)
        if key not in self._entries:
            self._pending[key] = value

    def _use(self, key: str) -> None:
        if key not in self._used:
            self._used[key] = None
            if self._journal is not None:
                self._unjournaled.append(key)

    def flush(self) -> Path | None:
        """Write the pending entries as one part (atomically); entries another job wrote
        meanwhile are left out. Returns the part's path, or None when nothing was new."""
        self.refresh()
        todo = {k: v for k, v in self._pending.items() if k not in self._entries}
        self._pending.clear()
        if not todo:
            return None
        path = self._write_shard(todo, part=True)
        self._entries.update(todo)
        self._seen.add(path.name)
        self._parts[path.name] = frozenset(todo)
        return path

    def _write_shard(self, entries: Mapping[str, Any], *, part: bool = False) -> Path:
        """Write ``entries`` as it stands (no ``_check``: callers pass checked values) with a
        checksum per entry and Parquet page checksums."""
        keys = sorted(entries)
        digests = [entry_checksum(self.key, k, self._canonical(entries[k])) for k in keys]
        table = pa.table({"key": pa.array(keys, pa.string()), **self._encode(keys, entries),
                          CHECKSUM_COLUMN: pa.array(digests, CHECKSUM_TYPE)}, schema=self.SCHEMA)
        table = table.replace_schema_metadata({IDENTITY_META: self.key.encode("ascii")})
        return atomic_write(self.dir / shard_name(self.key, keys, part=part),
                            lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))

    def write_job_shard(self) -> Path | None:
        """The job's end: one shard of every entry this job used (module docstring, Layout),
        then every part it covers removed (its own flushes, a killed run's of the same job,
        another job's whose entries it also used: their values are in this shard). Returns the
        shard's path, or None when the job used no entry. A shard of the same name that this
        object read whole already holds exactly these entries and is kept as it is."""
        self.flush()
        entries = {k: self._entries[k] for k in self._used if k in self._entries}
        if len(entries) < len(self._used):  # its shard was quarantined after this job read it
            log.warning("%s: %d of the %d entries this job used are no longer stored; its shard under %s "
                        "leaves them out", self.KIND, len(self._used) - len(entries), len(self._used), self.dir)
        if not entries:
            return None
        path = self.dir / shard_name(self.key, list(entries))
        if path.name not in self._seen or not path.exists():
            path = self._write_shard(entries)
            self._seen.add(path.name)
        for name, keys in list(self._parts.items()):
            if keys <= entries.keys():
                (self.dir / name).unlink(missing_ok=True)
                del self._parts[name]
        return path

    # -- the journal of a resumable job ----------------------------------------------------
    def keep_journal(self, folder: str | os.PathLike) -> int:
        """Record the keys this job uses in ``folder`` (its resume folder) at each
        :meth:`checkpoint`, and count those recorded there by a killed run of the same job as
        used: the work it finished is not read again, yet its entries belong in the job
        shard. Returns how many keys the journal held."""
        self._journal = Path(folder)
        self._unjournaled = list(self._used)  # used before the journal was kept: in its next file
        before = len(self._used)
        files = sorted(self._journal.glob(JOURNAL_PREFIX + "*.txt"))
        for path in files:
            self._used.update(dict.fromkeys(path.read_text(encoding="ascii").split()))
        self._journal_files = len(files)
        return len(self._used) - before

    def checkpoint(self) -> None:
        """Journal the keys used since the last checkpoint (one file, atomically), before the
        caller records the work they served as done."""
        if self._journal is None or not self._unjournaled:
            return
        name = f"{JOURNAL_PREFIX}{self._journal_files:06d}.txt"
        write_text_atomic(self._journal / name, "\n".join(self._unjournaled) + "\n")
        self._journal_files += 1
        self._unjournaled = []

    def provenance(self) -> dict:
        """What an output that used this cache records of it: where it lives and its identity. Not
        the counters of :meth:`stats`: they depend on what earlier and concurrent jobs read."""
        return {"dir": str(self.root), "identity_key": self.key}

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {**self.provenance(), "hits": self.hits, "misses": self.misses,
                "hit_rate": (self.hits / total) if total else None,
                "quarantined_shards": self.quarantined_shards, "quarantined_entries": self.quarantined_entries}


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["CHECKSUM_COLUMN", "CHECKSUM_TYPE", "IDENTITY_FILE", "IDENTITY_META", "JOURNAL_PREFIX", "PART_PREFIX",
           "QUARANTINE_DIR", "ShardStore", "entry_checksum", "identity_key", "shard_name", "shard_schema"]
