"""A content-addressed store of model work: one value per exact input, written once.

The machinery shared by the read cache (a prompt's grade probabilities,
:mod:`presdep.scoring.read_cache`) and the answer cache (a reader prompt's greedy
continuation, :mod:`presdep.scoring.answer_cache`). Entries live in a folder per *identity*
(everything a value depends on besides its input: model, adapter, template, dtype,
library versions); the key of an entry is a hash of the exact input token ids. How they are
stored and verified (Parquet shards with a checksum per entry; a shard that fails is
quarantined) is :mod:`presdep.runtime.shard_store`'s; this module adds the claims.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from presdep.runtime.shard_store import (
    CHECKSUM_COLUMN,
    CHECKSUM_TYPE,
    IDENTITY_FILE,
    IDENTITY_META,
    QUARANTINE_DIR,
    ShardStore,
    entry_checksum,
    identity_key,
    shard_name,
    shard_schema,
)

log = logging.getLogger(__name__)

CLAIMS_DIR = "claims"  # under the identity folder: one file per entry some job is computing now
CLAIM_SUFFIX = ".claim"
CLAIM_HEARTBEAT_S = 30.0  # a claimer touches its claims this often
CLAIM_STALE_S = 300.0  # a claim untouched this long (its mtime, or watched by a waiter) is taken over
CLAIM_WAIT_S = 3600.0  # a waiter computes a key itself after waiting this long for it, whatever the claim says
CLAIM_POLL_S = 0.05  # a waiter's first poll interval; it grows by half each poll up to CLAIM_POLL_MAX_S
CLAIM_POLL_MAX_S = 2.0
_SAFE_NAME = re.compile(r"[0-9A-Za-z_-]{1,128}")
_LIVE_TOKENS: set[str] = set()  # the tokens of the claims this process holds (any cache object)


class ContentCache(ShardStore):
    """A :class:`~presdep.runtime.shard_store.ShardStore` whose entries are claimed before
    they are computed: ``claim`` / ``await_claimed`` / ``release`` (see the module docstring).

    ``claims_taken_over`` / ``claims_waited`` count the stale claims this object took over
    and the keys of other jobs whose stored value it waited for.
    """

    def __init__(self, root: str | os.PathLike, identity: Mapping[str, Any]):
        super().__init__(root, identity)
        self.claims_dir = self.dir / CLAIMS_DIR
        self._held: dict[str, tuple[Path, bytes, str]] = {}  # key -> (claim file, its bytes, token) held here
        self._held_lock = threading.Lock()
        self._beat: threading.Thread | None = None
        self._watch: dict[Path, tuple[int, float]] = {}  # claim file -> (mtime_ns, first seen with it, monotonic)
        self.claims_taken_over = 0  # stale claims of other jobs (or of killed ones) this object took over
        self.claims_waited = 0  # keys claimed by another job whose stored value this object waited for
        self.sweep_stale_claims()

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


__all__ = ["CHECKSUM_COLUMN", "CHECKSUM_TYPE", "CLAIMS_DIR", "CLAIM_HEARTBEAT_S", "CLAIM_STALE_S", "CLAIM_WAIT_S",
           "IDENTITY_FILE", "IDENTITY_META", "QUARANTINE_DIR", "ContentCache", "entry_checksum", "identity_key",
           "shard_name", "shard_schema"]
