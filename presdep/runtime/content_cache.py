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

Integrity: the cache is shared by every later run, so a value read back is served only
when it provably is the value written. Every entry carries a ``sha256`` column, the digest
of its key and a canonical encoding of its value (:func:`entry_checksum`; each cache says
what its canonical bytes are), and shards are written with Parquet page checksums
(CRC32, verified on read). A shard is loaded whole or not at all: one that cannot be read
(a page checksum, the footer, the schema), or that holds an entry whose checksum does not
match or whose value the cache refuses (:meth:`ContentCache._validate`), or whose name is
not the hash of its keys (a row lost or added), is reported (a warning naming the shard,
its entry count and the reason), moved to ``<identity dir>/quarantine/`` so that no later
run reads it, and counted in :meth:`ContentCache.stats`. Its entries are then simply
missing: a lookup misses them and the caller computes them again.

Claims: one computation per entry, also across concurrent jobs. A job about to compute an
entry first *claims* its key (:meth:`ContentCache.claim`): it creates
``<identity dir>/claims/<key>.claim`` with ``O_CREAT | O_EXCL`` (atomic on local disks and on
NFS v3 and later), holding its host, boot id, pid namespace, pid and that pid's start time,
a timestamp and a random token. It computes the entry, ``put`` + ``flush``es it, and only then
removes the claim (:meth:`ContentCache.release`). A job that finds a live claim on a key it
needs computes its other keys first, then waits for the claimer's shard
(:meth:`ContentCache.await_claimed`, polling the cache). While a job holds claims, a
background thread touches them every ``CLAIM_HEARTBEAT_S`` seconds. A claim is *stale*, and
is taken over (renamed away, checked to be the one judged, then claimed afresh), when its
claimer is dead on this host (no such pid, a zombie, another process under that pid, or a
claim this very process no longer holds), when its mtime is ``CLAIM_STALE_S`` seconds old
(no heartbeat: a job killed on another host), when a waiter has watched it unchanged for
``CLAIM_STALE_S`` seconds of its own clock (a clock skew between hosts cannot keep a dead
claim alive), or when a waiter has waited ``CLAIM_WAIT_S`` seconds for one key whatever the
claim says. A claim whose entry is already stored, or whose claimer released it without
storing it (it failed), is no longer waited for. Misjudging a claim costs at most a second
computation of an entry (the shards stay valid: two copies of a key are both complete), never
a wrong value, and no claim blocks a job forever.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from presdep.contracts.schemas import atomic_write, write_text_atomic

log = logging.getLogger(__name__)

IDENTITY_FILE = "identity.json"
QUARANTINE_DIR = "quarantine"  # under the identity folder: shards found corrupt, never read again
CHECKSUM_COLUMN = "sha256"
CHECKSUM_TYPE = pa.binary(32)
CLAIMS_DIR = "claims"  # under the identity folder: one file per entry some job is computing now
CLAIM_SUFFIX = ".claim"
CLAIM_HEARTBEAT_S = 30.0  # a claimer touches its claims this often
CLAIM_STALE_S = 300.0  # a claim untouched this long (its mtime, or watched by a waiter) is taken over
CLAIM_WAIT_S = 3600.0  # a waiter computes a key itself after waiting this long for it, whatever the claim says
CLAIM_POLL_S = 0.05  # a waiter's first poll interval; it grows by half each poll up to CLAIM_POLL_MAX_S
CLAIM_POLL_MAX_S = 2.0
_SAFE_NAME = re.compile(r"[0-9A-Za-z_-]{1,128}")
_LIVE_TOKENS: set[str] = set()  # the tokens of the claims this process holds (any cache object)


def identity_key(identity: Mapping[str, Any], format_version: int) -> str:
    """The folder name of an identity: sha256 of its canonical JSON."""
    text = json.dumps({"format": format_version, **identity}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def shard_schema(*value_fields: tuple[str, pa.DataType]) -> pa.Schema:
    """A shard's schema: ``key`` (string), the cache's value columns, then ``sha256`` (32 bytes)."""
    return pa.schema([("key", pa.string()), *value_fields, (CHECKSUM_COLUMN, CHECKSUM_TYPE)])


def entry_checksum(key: str, canonical: bytes) -> bytes:
    """The stored checksum of one entry: sha256 over the key's UTF-8 length (uint64,
    little-endian), the key, and the value's canonical bytes."""
    kb = key.encode("utf-8")
    h = hashlib.sha256()
    h.update(len(kb).to_bytes(8, "little"))
    h.update(kb)
    h.update(canonical)
    return h.digest()


def shard_name(keys: Sequence[str]) -> str:
    """A shard's file name: the hash of its (sorted) keys."""
    return hashlib.sha256("\n".join(sorted(keys)).encode("utf-8")).hexdigest()[:40] + ".parquet"


class ContentCache:
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
        self._written: list[Path] = []
        self.hits = 0
        self.misses = 0
        self.quarantined_shards = 0
        self.quarantined_entries = 0  # rows of those shards (where the footer still said how many)
        self.claims_dir = self.dir / CLAIMS_DIR
        self._held: dict[str, tuple[Path, bytes, str]] = {}  # key -> (claim file, its bytes, token) held here
        self._held_lock = threading.Lock()
        self._beat: threading.Thread | None = None
        self._watch: dict[Path, tuple[int, float]] = {}  # claim file -> (mtime_ns, first seen with it, monotonic)
        self.claims_taken_over = 0  # stale claims of other jobs (or of killed ones) this object took over
        self.claims_waited = 0  # keys claimed by another job whose stored value this object waited for
        self.refresh()
        self.sweep_stale_claims()

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
            table = pq.read_table(path, schema=self.SCHEMA, page_checksum_verification=True)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - whatever the damage, the shard is not trusted
            # Shards are renamed into place whole, so this is damage from outside.
            self._quarantine(path, f"unreadable ({type(exc).__name__}: {_short(exc)})", None, before)
            return None
        try:
            entries, problem = self._verify(table, path.name)
        except Exception as exc:  # noqa: BLE001 - a value column that does not even decode
            entries, problem = {}, f"undecodable ({type(exc).__name__}: {_short(exc)})"
        if problem is not None:
            self._quarantine(path, problem, table.num_rows, before)
            return None
        return entries

    def _verify(self, table: pa.Table, name: str) -> tuple[dict[str, Any], str | None]:
        """(entries, None) when every row of a shard checks out, else ({}, the reason)."""
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
                elif digest != entry_checksum(k, self._canonical(value)):
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
        if shard_name(list(entries)) != name:
            return {}, "its name is not the hash of its keys (a row lost or added)"
        return entries, None

    def _quarantine(self, path: Path, reason: str, rows: int | None, before: os.stat_result | None) -> None:
        """Move a corrupt shard to ``quarantine/`` (keeping every earlier one) and say so."""
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
                log.warning("%s: shard %s read as corrupt (%s entries; %s) but was replaced meanwhile; "
                            "reading it again", self.KIND, path, entries, reason)
                self._seen.discard(path.name)
                return
            qdir.mkdir(exist_ok=True)
            os.replace(path, dest)
        except FileNotFoundError:
            # Another reader quarantined it (or a compaction removed it) first.
            self._seen.discard(path.name)
        except OSError as exc:
            log.warning("%s: corrupt shard %s (%s entries; %s) could not be moved to %s (%s); ignoring it",
                        self.KIND, path, entries, reason, qdir, exc)
            self._seen.add(path.name)  # not read again by this object
        else:
            self._seen.discard(path.name)  # a fresh shard of that name is read again
            log.warning("%s: corrupt shard %s (%s entries; %s): moved to %s, its entries will be computed "
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
        """Write ``entries`` as it stands (no ``_check``: callers pass checked values) with a
        checksum per entry and Parquet page checksums."""
        keys = sorted(entries)
        digests = [entry_checksum(k, self._canonical(entries[k])) for k in keys]
        table = pa.table({"key": pa.array(keys, pa.string()), **self._encode(keys, entries),
                          CHECKSUM_COLUMN: pa.array(digests, CHECKSUM_TYPE)}, schema=self.SCHEMA)
        return atomic_write(self.dir / shard_name(keys),
                            lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))

    def compact_written(self) -> Path | None:
        """Merge the shards this object wrote into one (written first, then the parts
        removed), so a job leaves one shard however often it flushed. A part found corrupt
        is quarantined and left out."""
        if len(self._written) < 2:
            return None
        merged: dict[str, Any] = {}
        parts = []
        for path in self._written:
            loaded = self._load(path)
            if loaded is None:
                continue
            parts.append(path)
            for k, value in loaded.items():
                merged.setdefault(k, value)
        if not merged:
            self._written = []
            return None
        out = self._write_shard(merged)
        for path in parts:
            if path != out:
                path.unlink(missing_ok=True)
        self._seen.add(out.name)
        self._written = [out]
        return out

    # -- claims (see the module docstring) ------------------------------------------------
    def claim_path(self, key: str) -> Path:
        name = key if _SAFE_NAME.fullmatch(key) else hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.claims_dir / (name + CLAIM_SUFFIX)

    def claim(self, keys: Sequence[str]) -> tuple[list[str], dict[str, Any], list[str]]:
        """Claim ``keys`` for this job to compute: ``(mine, stored, theirs)``.

        ``mine``: claimed now (or already held): compute them, ``put`` and ``flush``, then
        :meth:`release` them. ``stored``: values another job stored since the caller's last
        lookup (no claim is kept on them). ``theirs``: claimed by another live job; wait for
        them with :meth:`await_claimed` after computing ``mine``. A stale claim is taken over."""
        mine: list[str] = []
        theirs: list[str] = []
        for k in dict.fromkeys(keys):
            if k in self._held or self._try_claim(k):
                mine.append(k)
            else:
                theirs.append(k)
        stored: dict[str, Any] = {}
        if mine:
            # A job may have stored one and released its claim between the caller's lookup and now.
            self.refresh()
            stored = {k: v for k in mine if (v := self.get(k)) is not None}
            if stored:
                self.release(list(stored))
                mine = [k for k in mine if k not in stored]
        return mine, stored, theirs

    def await_claimed(self, keys: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
        """Wait until some of ``keys`` (claimed by other jobs) are resolved: ``(stored, mine)``.

        ``stored``: the values their claimers stored; ``mine``: keys this object claimed
        instead, because their claim went away without a value (the claimer failed) or is
        stale, or because ``CLAIM_WAIT_S`` passed (compute, put, flush and release them as for
        :meth:`claim`). Returns as soon as one key is resolved, with every key resolved by then;
        ``({}, [])`` only for no keys."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}, []
        t0 = time.monotonic()
        delay = CLAIM_POLL_S
        while True:
            self.refresh()
            stored = {k: v for k in keys if (v := self.get(k)) is not None}
            mine: list[str] = []
            waited_long = time.monotonic() - t0 >= CLAIM_WAIT_S
            for k in keys:
                if k in stored:
                    continue
                if k in self._held or self._try_claim(k, force=f"waited {CLAIM_WAIT_S:g} s" if waited_long else None):
                    mine.append(k)
                elif waited_long:  # the claim could not even be replaced: compute it unclaimed
                    log.warning("%s: waited %g s for %s, claimed by another job; computing it here", self.KIND,
                                CLAIM_WAIT_S, k[:16])
                    mine.append(k)
            if mine:  # the claimer may have stored it just before its claim went
                self.refresh()
                late = {k: v for k in mine if (v := self.get(k)) is not None}
                if late:
                    self.release(list(late))
                    stored.update(late)
                    mine = [k for k in mine if k not in late]
            if stored or mine:
                self.claims_waited += len(stored)
                for k in stored:
                    self._watch.pop(self.claim_path(k), None)
                return stored, mine
            time.sleep(delay)
            delay = min(delay * 1.5, CLAIM_POLL_MAX_S)

    def release(self, keys: Sequence[str]) -> None:
        """Remove this object's claims on ``keys`` (after their values were flushed, or when
        giving up on computing them). A claim another job has taken over meanwhile stays."""
        with self._held_lock:
            held = [self._held.pop(k) for k in keys if k in self._held]
        for path, payload, token in held:
            _LIVE_TOKENS.discard(token)
            try:
                if path.read_bytes() == payload:
                    path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("%s: could not remove claim %s (%s); it goes stale", self.KIND, path, exc)

    def release_all(self) -> None:
        self.release(list(self._held))

    def held_claims(self) -> list[str]:
        return list(self._held)

    def sweep_stale_claims(self) -> int:
        """Remove the stale claims (and takeover leftovers) under this identity; returns how
        many. Claims of live jobs stay."""
        try:
            names = list(os.scandir(self.claims_dir))
        except FileNotFoundError:
            return 0
        removed = 0
        for entry in names:
            path = Path(entry.path)
            if entry.name.startswith(".") and entry.name.endswith(".stale"):
                try:  # a takeover interrupted between its rename and its unlink
                    if time.time() - entry.stat().st_mtime > CLAIM_STALE_S:
                        path.unlink()
                except OSError:
                    pass
                continue
            if not entry.name.endswith(CLAIM_SUFFIX):
                continue
            state = _read_claim(path)
            if state is not None and self._stale(path, *state) is not None:
                try:
                    if path.read_bytes() == state[0]:
                        path.unlink()
                        removed += 1
                except OSError:
                    pass
        return removed

    def _try_claim(self, key: str, force: str | None = None) -> bool:
        """Create the claim on ``key``, taking over a stale one (or any, with ``force``: the reason)."""
        path = self.claim_path(key)
        for _ in range(3):
            if self._create_claim(key, path):
                return True
            state = _read_claim(path)
            if state is None:
                continue  # released between the two calls: try again
            why = force or self._stale(path, *state)
            if why is None:
                return False
            if self._take_over(key, path, state[0], why):
                return True
        return False

    def _create_claim(self, key: str, path: Path) -> bool:
        token = uuid.uuid4().hex
        payload = (json.dumps({"key": key, **_HOST, "pid": os.getpid(), "pid_start": _own_start(),
                               "time": time.time(), "token": token}, sort_keys=True) + "\n").encode("utf-8")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except FileNotFoundError:
            self.claims_dir.mkdir(exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
        try:
            os.write(fd, payload)
        finally:
            os.close(fd)
        _LIVE_TOKENS.add(token)
        with self._held_lock:
            self._held[key] = (path, payload, token)
            if self._beat is None:
                self._beat = threading.Thread(target=self._heartbeat, name=f"{self.KIND} claims", daemon=True)
                self._beat.start()
        self._watch.pop(path, None)
        return True

    def _heartbeat(self) -> None:
        """Touch the held claims every CLAIM_HEARTBEAT_S seconds; ends when none is held."""
        while True:
            time.sleep(CLAIM_HEARTBEAT_S)
            with self._held_lock:
                paths = [p for p, _, _ in self._held.values()]
                if not paths:
                    self._beat = None
                    return
            for path in paths:
                try:
                    os.utime(path)
                except OSError:
                    pass  # released meanwhile

    def _stale(self, path: Path, data: bytes, st: os.stat_result) -> str | None:
        """Why a claim (its bytes and stat) is stale, or None while its claimer may be alive."""
        info = _parse_claim(data)
        if info is not None and all(info.get(f) == v for f, v in _HOST.items()) and isinstance(info.get("pid"), int):
            pid = info["pid"]
            if pid == os.getpid():
                if info.get("token") not in _LIVE_TOKENS:
                    return "left by this process"
            else:
                state, start = _proc_state(pid)
                if state is None:
                    return f"its claimer (pid {pid}) is dead"
                if state in ("Z", "X"):
                    return f"its claimer (pid {pid}) has exited"
                if start is not None and info.get("pid_start") is not None and start != info["pid_start"]:
                    return f"pid {pid} is another process now"
        age = time.time() - st.st_mtime
        if age >= CLAIM_STALE_S:
            return f"untouched for {age:.0f} s"
        now = time.monotonic()
        seen = self._watch.get(path)
        if seen is None or seen[0] != st.st_mtime_ns:
            self._watch[path] = (st.st_mtime_ns, now)
        elif now - seen[1] >= CLAIM_STALE_S:
            return f"watched unchanged for {now - seen[1]:.0f} s"
        return None

    def _take_over(self, key: str, path: Path, judged: bytes, why: str) -> bool:
        """Replace the stale claim ``judged`` by this object's own; False when another job got there first."""
        tomb = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.stale")
        try:
            os.rename(path, tomb)
        except FileNotFoundError:
            return self._create_claim(key, path)
        except OSError as exc:
            log.warning("%s: could not take over the stale claim %s (%s; %s)", self.KIND, path, why, exc)
            return False
        try:
            moved = tomb.read_bytes()
        except OSError:
            moved = None
        if moved != judged:
            # Another job replaced the stale claim first: put its fresh claim back.
            try:
                os.link(tomb, path)
            except OSError:
                pass
            tomb.unlink(missing_ok=True)
            return False
        tomb.unlink(missing_ok=True)
        self._watch.pop(path, None)
        info = _parse_claim(judged) or {}
        log.info("%s: took over the claim on %s (%s; host %s, pid %s)", self.KIND, key[:16], why,
                 info.get("host", "?"), info.get("pid", "?"))
        self.claims_taken_over += 1
        return self._create_claim(key, path)

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {"dir": str(self.root), "identity_key": self.key, "hits": self.hits, "misses": self.misses,
                "hit_rate": (self.hits / total) if total else None,
                "quarantined_shards": self.quarantined_shards, "quarantined_entries": self.quarantined_entries}


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _proc_state(pid: int) -> tuple[str | None, int | None]:
    """A process's state letter and start time (clock ticks after boot), from /proc; (None, None)
    when there is no such process. Where /proc is missing: ("?", None) for a live pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None, None
    except OSError:
        pass
    else:
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
        try:
            return fields[0], int(fields[19])
        except (IndexError, ValueError):
            return fields[0] if fields else "?", None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None, None
    except PermissionError:
        pass
    return "?", None


# Where a claim was made: a claim matching all three was made on this host (the same boot and
# pid namespace), so its pid can be checked. Not the hostname alone: containers may share one.
_HOST = {"host": socket.gethostname(), "boot": _boot_id(), "pidns": _pid_namespace()}
_STARTS: dict[int, int | None] = {}


def _own_start() -> int | None:
    """This process's start time (as in /proc), looked up once per pid (a forked child has its own)."""
    pid = os.getpid()
    if pid not in _STARTS:
        _STARTS[pid] = _proc_state(pid)[1]
    return _STARTS[pid]


def _read_claim(path: Path) -> tuple[bytes, os.stat_result] | None:
    """A claim file's bytes and stat, or None when there is none."""
    try:
        st = os.stat(path)
        return path.read_bytes(), st
    except FileNotFoundError:
        return None


def _parse_claim(data: bytes) -> dict | None:
    """A claim's fields, or None (empty: its claimer is writing it; damaged: judged by its age)."""
    try:
        info = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["CHECKSUM_COLUMN", "CLAIMS_DIR", "CLAIM_HEARTBEAT_S", "CLAIM_STALE_S", "CLAIM_WAIT_S", "IDENTITY_FILE",
           "QUARANTINE_DIR", "ContentCache", "entry_checksum", "identity_key", "shard_name", "shard_schema"]
