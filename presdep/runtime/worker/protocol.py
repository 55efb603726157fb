"""What the executor and the worker say to each other over a Unix socket: length-prefixed JSON
messages, the first one carrying the job's stdin, stdout and stderr as file descriptors. The worker
checks every request it reads (validate_request) before it acts on any of it."""

from __future__ import annotations

import array
import json
import os
import socket
import struct
import sys
from collections.abc import Callable, Iterable, Mapping

from presdep.contracts.errors import InvalidInput, cut

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
# A request is a few kB (the job's environment); far more is no request of our client's.
MAX_MESSAGE_BYTES = 8 * 2**20
JOB_DESCRIPTORS = 3  # the job's stdin, stdout and stderr


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


class MessageReader:
    """One message read from a non-blocking socket as its bytes arrive, so that a slow sender holds
    up nobody else. ``read`` says whether the message is complete (then it is ``message``) and
    raises InvalidInput for bytes that are no message, ConnectionError when the peer closed first."""

    def __init__(self, max_fds: int = JOB_DESCRIPTORS):
        self.max_fds = max_fds
        self.fds: list[int] = []
        self.message: object = None  # any JSON value, null included: what is sent is checked later
        self._marked = False
        self._buffer = bytearray()

    def read(self, sock: socket.socket) -> bool:
        try:
            if not self._marked:
                self._read_mark(sock)
            while True:
                wanted = self._wanted()
                if wanted == 0:
                    self.message = self._decode()
                    return True
                chunk = sock.recv(min(wanted, 2**16))
                if not chunk:
                    raise ConnectionError("the client closed the connection before its message ended")
                self._buffer += chunk
        except BlockingIOError:
            return False

    def close_fds(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def _read_mark(self, sock: socket.socket) -> None:
        mark, fds, _flags, _addr = socket.recv_fds(sock, 1, max(self.max_fds, 1))
        for fd in fds[self.max_fds:]:
            os.close(fd)
        self.fds += fds[:self.max_fds]
        if not mark:
            raise ConnectionError("the client closed the connection without a message")
        if mark != _MARK:
            raise InvalidInput(f"a message starts with the byte {_MARK!r}, not {mark!r}")
        self._marked = True

    def _wanted(self) -> int:
        if len(self._buffer) < _HEADER.size:
            return _HEADER.size - len(self._buffer)
        (length,) = _HEADER.unpack_from(self._buffer)
        if length > MAX_MESSAGE_BYTES:
            raise InvalidInput(f"a message is at most {MAX_MESSAGE_BYTES:,} bytes, this one says {length:,}")
        return _HEADER.size + length - len(self._buffer)

    def _decode(self) -> object:
        try:
            return json.loads(bytes(self._buffer[_HEADER.size:]))
        except (ValueError, RecursionError) as error:  # not UTF-8 or JSON, a number too long, nested too deep
            raise InvalidInput(f"a message's body is not JSON: {cut(str(error))}") from None


def _json_type(value: object) -> str:
    names = ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"),
             (list, "an array"), (dict, "an object"))
    return next((name for kind, name in names if isinstance(value, kind)), "null")


def _shown(value: object) -> str:
    """The value's JSON type, and the value itself unless it is an array or object (of any depth)."""
    if value is None or isinstance(value, (list, dict)):
        return _json_type(value)
    return f"{_json_type(value)} {cut(value)}"


def _path(key: str, value: object) -> None:
    if not isinstance(value, str) or not value or "\0" in value:
        raise InvalidInput(f"{key!r} must be a non-empty string without NUL, got {_shown(value)}")


def _absolute_path(key: str, value: object) -> None:
    _path(key, value)
    if not os.path.isabs(value):
        raise InvalidInput(f"{key!r} must be an absolute path, got {cut(value)}")


def _environment(key: str, value: object) -> None:
    if not isinstance(value, dict):
        raise InvalidInput(f"{key!r} must be an object of names to strings, got {_json_type(value)}")
    for name, text in value.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise InvalidInput(f"{key!r} has the name {cut(name)}; a variable's name is non-empty, without = or NUL")
        if not isinstance(text, str) or "\0" in text:
            raise InvalidInput(f"{key!r}[{cut(name)}] must be a string without NUL, got {_shown(text)}")


# Each request's fields beside "op", and how each is checked.
REQUEST_FIELDS: dict[str, dict[str, Callable[[str, object], None]]] = {
    "hello": {},
    "stop": {},
    "run": {"script": _absolute_path, "cwd": _absolute_path, "env": _environment, "python": _path},
}


def validate_request(message: object, descriptors: int = 0) -> dict:
    """``message`` as a request the worker can act on, sent with ``descriptors`` file descriptors;
    InvalidInput with a one-line reason naming the first key that is wrong and what it must be."""
    if not isinstance(message, dict):
        raise InvalidInput(f"a request must be a JSON object, got {_json_type(message)}")
    op = message.get("op")
    if not isinstance(op, str) or op not in REQUEST_FIELDS:
        raise InvalidInput(f"'op' must be one of {', '.join(sorted(REQUEST_FIELDS))}; got {_shown(op)}")
    fields = REQUEST_FIELDS[op]
    missing = sorted(fields.keys() - message.keys())
    if missing:
        raise InvalidInput(f"a {op!r} request needs the key(s) {', '.join(missing)}")
    unexpected = sorted(message.keys() - fields.keys() - {"op"})
    if unexpected:
        raise InvalidInput(f"a {op!r} request has no key {cut(unexpected[0])}; its keys: {', '.join(['op', *fields])}")
    for key, check in fields.items():
        check(key, message[key])
    expected = JOB_DESCRIPTORS if op == "run" else 0
    if descriptors != expected:
        raise InvalidInput(f"a {op!r} request carries {expected} file descriptors, got {descriptors}")
    return message


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
