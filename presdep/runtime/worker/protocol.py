"""What the executor and the worker say to each other over a Unix socket: length-prefixed JSON
messages, the first one carrying the job's stdin, stdout and stderr as file descriptors."""

from __future__ import annotations

import array
import json
import os
import socket
import struct
import sys
from collections.abc import Iterable, Mapping

# The variables Snakemake sets per job (threads, tmpdir): the only ones a job may differ in from
# the worker's environment. Any other difference means the worker's imports may not be the job's.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
TMPDIR_VARIABLES = ("TMPDIR", "TMP", "TEMPDIR", "TEMP")
JOB_VARIABLES = frozenset(THREAD_VARIABLES + TMPDIR_VARIABLES)
# Set for the worker alone, unless the environment sets them already: one OpenBLAS thread when numpy
# loads (each job then sets its own count) and no jemalloc purging thread when pyarrow loads (a
# fork keeps only the forking thread). ADDED names the ones the client set, which jobs do not have.
WORKER_SETTINGS = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
ADDED = "PRESDEP_WORKER_ADDED"
_HEADER = struct.Struct("!I")
_MARK = b"M"


def send(sock: socket.socket, message: Mapping, fds: Iterable[int] = ()) -> None:
    """One message: a one-byte mark carrying ``fds`` (a send with descriptors may be short), then
    the length-prefixed JSON."""
    fds = array.array("i", fds)
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)] if fds else []
    sock.sendmsg([_MARK], ancillary)
    body = json.dumps(message).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """The next message (None when the peer closed) and the descriptors sent with it (at most
    ``max_fds``: more are closed, and so are all of them when the message is unreadable)."""
    mark, fds, _flags, _addr = socket.recv_fds(sock, 1, max(max_fds, 1))
    if len(fds) > max_fds:
        for fd in fds[max_fds:]:
            os.close(fd)
        fds = fds[:max_fds]
    header = _exactly(sock, _HEADER.size) if mark == _MARK else None
    body = _exactly(sock, _HEADER.unpack(header)[0]) if header is not None else None
    if body is None:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(body), fds


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def worker_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment: ``env`` with WORKER_SETTINGS where it leaves them unset."""
    out = dict(env)
    added = [k for k in WORKER_SETTINGS if k not in out or k in JOB_VARIABLES]
    out.update({k: WORKER_SETTINGS[k] for k in added})
    out[ADDED] = ",".join(added)
    return out


def environment_as_started(env: Mapping[str, str]) -> dict[str, str]:
    """What the client's environment was, from the worker's (worker_environment undone)."""
    out = dict(env)
    for k in filter(None, out.pop(ADDED, "").split(",")):
        out.pop(k, None)
    return out


def stable_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment that must match the worker's for it to run a job."""
    return {k: v for k, v in env.items() if k not in JOB_VARIABLES}


def environment_differences(job_env: Mapping[str, str], worker_env: Mapping[str, str]) -> list[str]:
    """Names of the variables (outside JOB_VARIABLES) set differently, or only on one side."""
    a, b = stable_environment(job_env), stable_environment(worker_env)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def code_stamp(paths: Iterable[str] | None = None) -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of ``paths``, by default every file this process imported and every folder
    on sys.path: an install, an upgrade or an edit of anything loaded changes it."""
    if paths is None:
        found = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
        found.update(sys.path)
        paths = sorted(p for p in found if p)
    stamp = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        stamp[path] = (st.st_mtime_ns, st.st_size)
    return stamp


def stamp_differences(now: Mapping[str, tuple[int, int]], loaded: Mapping[str, tuple[int, int]]) -> list[str]:
    return sorted(p for p in loaded if tuple(now.get(p, ())) != tuple(loaded[p]))
