"""The executor's side of the worker: start it, hand it a job, learn how the job ended, stop it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from presdep.runtime.worker import protocol
from presdep.runtime.worker.interruption import JobStopped

READY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class JobEnd:
    exit: int
    cpu_s: float
    max_rss_mb: float
    read_bytes: int
    write_bytes: int
    wall_s: float


class WorkerUnavailable(RuntimeError):
    """The worker cannot run this job (it refused, failed to start or died): run it as usual."""


class WorkerGone(WorkerUnavailable):
    """The worker process is gone (killed, crashed, never ready): this job and every later one run
    as usual. ``first`` is true for the first job that learns it, the one that says so."""

    def __init__(self, reason: str, first: bool):
        super().__init__(reason)
        self.first = first


def _exit_text(code: int | None) -> str:
    if code is None:
        return "it does not accept connections"
    if code < 0:
        return f"it was killed by {signal.Signals(-code).name}"
    return f"it exited with {code}"


class WorkerClient:
    """One worker per Snakemake run, started beside it and stopped with it."""

    def __init__(self, env: Mapping[str, str] | None = None, request_timeout_s: float | None = None,
                 preload: Sequence[str] | None = None):
        """``request_timeout_s`` and ``preload`` replace the worker's defaults (server.py) when given."""
        # A short folder of its own: a Unix socket's path may not exceed 107 bytes.
        self.folder = tempfile.mkdtemp(prefix="presdep-worker-")
        self.path = os.path.join(self.folder, "socket")
        worker_env = protocol.worker_environment(os.environ if env is None else env)
        options = [] if request_timeout_s is None else ["--request-timeout", str(request_timeout_s)]
        options += [] if preload is None else ["--preload", ",".join(preload)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "presdep.runtime.worker.server", self.path, str(os.getpid()), *options],
            # Started in its own folder: `-m` puts the working folder first on sys.path, and a
            # checkout's presdep/ there must not stand in for the installed one the jobs import.
            stdin=subprocess.DEVNULL, env=worker_env, cwd=self.folder,
        )
        self.python = sys.executable
        self.preload_s: float | None = None
        self.stopped = False
        self.gone: str | None = None  # why the worker cannot serve any more, once it cannot
        self._gone_lock = threading.Lock()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds of CPU the worker spent importing; raises WorkerUnavailable if it never answers."""
        if self.preload_s is not None:
            return self.preload_s
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stopped:
                raise WorkerUnavailable("the worker was stopped")
            if self.gone is not None or self.process.poll() is not None:
                raise self._went(f"the worker is gone while loading ({_exit_text(self.process.poll())})")
            try:
                with self._connect() as sock:
                    protocol.send(sock, {"op": "hello"})
                    answer, _ = protocol.receive(sock)
                if answer and answer.get("ready"):
                    self.preload_s = float(answer["preload_s"])
                    return self.preload_s
            except OSError:
                pass
            time.sleep(0.1)
        raise self._went(f"the worker did not answer within {timeout:.0f} s")

    def run(self, script: str, cwd: str, env: Mapping[str, str],
            watch: Callable[[int], AbstractContextManager] = lambda pid: nullcontext(),
            stdio: tuple[int, int, int] = (0, 1, 2)) -> JobEnd:
        """Run ``script`` as ``python script`` in ``cwd`` with ``env`` and ``stdio`` (by default this
        process's stdin, stdout and stderr, as a job Snakemake starts has them); ``watch(pid)`` is
        entered once the job runs and left when it ends (Snakemake's benchmark samples it there).
        WorkerUnavailable: the job did not start (run it as usual); JobStopped: a stop ended it."""
        self.wait_ready()
        if self.gone is not None:
            raise self._went(self.gone)
        try:
            sock = self._connect()
        except OSError:  # refused, or the socket file is gone: nobody listens there any more
            raise self._went(f"the worker is gone ({_exit_text(self._exit_code(0.5))})") from None
        try:
            request = {"op": "run", "script": script, "cwd": cwd, "env": dict(env), "python": self.python}
            answer = self._exchange(sock, request, stdio)
            if "pid" not in answer:
                why = answer.get("refused") or f"it rejected the request: {answer.get('error')}"
                raise WorkerUnavailable(why)
            with watch(answer["pid"]):
                end = self._receive(sock)
        finally:
            sock.close()
        return self._job_end(answer["pid"], end)

    def _exchange(self, sock: socket.socket, request: dict, stdio: tuple[int, int, int]) -> dict:
        """The worker's answer to ``request``: it started the job, refused it, or rejected it."""
        try:
            protocol.send(sock, request, fds=stdio)
        except OSError:
            pass  # the worker closed first; whether it died is told below
        answer = self._receive(sock)
        if answer is not None:
            return answer
        code = self._exit_code(1.0)  # a worker that closes without an answer is on its way out
        if code is None:
            raise WorkerUnavailable("the worker closed the connection without an answer")
        raise self._went(f"the worker is gone ({_exit_text(code)})")

    def _exit_code(self, wait_s: float) -> int | None:
        """The worker's exit code once it has exited, waiting up to ``wait_s``; None while it runs."""
        try:
            return self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            return None

    @staticmethod
    def _receive(sock: socket.socket) -> dict | None:
        try:
            message, _ = protocol.receive(sock)
        except (OSError, ValueError):  # reset, or a message cut short by the worker's death
            return None
        return message

    def _job_end(self, pid: int, end: dict | None) -> JobEnd:
        if end is not None and "stopped" in end:
            raise JobStopped(end["stopped"], pid)  # a signal stopped the worker
        if end is None:
            if self.stopped:
                raise JobStopped(None, pid)  # the run stopped the worker (the executor says why)
            self._went(f"the worker died while job {pid} ran ({_exit_text(self._exit_code(1.0))})")
            raise RuntimeError(f"the worker died while job {pid} ran (the job was killed with it)")
        return JobEnd(end["exit"], end["cpu_s"], end["max_rss_kb"] / 1024, end["read_bytes"], end["write_bytes"],
                      end["wall_s"])

    def _went(self, reason: str) -> WorkerGone:
        """Note that the worker is gone; the first job that learns it says so, the later ones do not."""
        with self._gone_lock:
            first = self.gone is None
            if first:
                self.gone = reason
        return WorkerGone(self.gone, first)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker and every job it runs; idempotent."""
        self.stopped = True
        if self.process.poll() is None:
            try:
                with self._connect() as sock:
                    protocol.send(sock, {"op": "stop"})
            except OSError:
                self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        return sock
