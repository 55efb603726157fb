"""The executor's side of the worker: start it, hand it a job, learn how the job ended, stop it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from presdep.runtime.worker import protocol

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


class WorkerClient:
    """One worker per Snakemake run, started beside it and stopped with it."""

    def __init__(self, env: Mapping[str, str] | None = None):
        # A short folder of its own: a Unix socket's path may not exceed 107 bytes.
        self.folder = tempfile.mkdtemp(prefix="presdep-worker-")
        self.path = os.path.join(self.folder, "socket")
        worker_env = protocol.worker_environment(os.environ if env is None else env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "presdep.runtime.worker.server", self.path, str(os.getpid())],
            # Started in its own folder: `-m` puts the working folder first on sys.path, and a
            # checkout's presdep/ there must not stand in for the installed one the jobs import.
            stdin=subprocess.DEVNULL, env=worker_env, cwd=self.folder,
        )
        self.python = sys.executable
        self.preload_s: float | None = None
        self.stopped = False

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds of CPU the worker spent importing; raises WorkerUnavailable if it never answers."""
        if self.preload_s is not None:
            return self.preload_s
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stopped:
                raise WorkerUnavailable("the worker was stopped")
            if self.process.poll() is not None:
                raise WorkerUnavailable(f"the worker exited with {self.process.returncode} while loading")
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
        raise WorkerUnavailable(f"the worker did not answer within {timeout:.0f} s")

    def run(self, script: str, cwd: str, env: Mapping[str, str],
            watch: Callable[[int], AbstractContextManager] = lambda pid: nullcontext(),
            stdio: tuple[int, int, int] = (0, 1, 2)) -> JobEnd:
        """Run ``script`` as ``python script`` in ``cwd`` with ``env`` and ``stdio`` (by default this
        process's stdin, stdout and stderr, as a job Snakemake starts has them); ``watch(pid)`` is
        entered once the job runs and left when it ends (Snakemake's benchmark samples it there)."""
        self.wait_ready()
        sock = self._connect()
        try:
            request = {"op": "run", "script": script, "cwd": cwd, "env": dict(env), "python": self.python}
            protocol.send(sock, request, fds=stdio)
            answer, _ = protocol.receive(sock)
            if answer is None or "pid" not in answer:
                raise WorkerUnavailable((answer or {}).get("refused") or "the worker closed the connection")
            with watch(answer["pid"]):
                end, _ = protocol.receive(sock)
        finally:
            sock.close()
        if end is None:
            raise RuntimeError(f"the worker died while job {answer['pid']} ran (the job was killed with it)")
        return JobEnd(end["exit"], end["cpu_s"], end["max_rss_kb"] / 1024, end["read_bytes"], end["write_bytes"],
                      end["wall_s"])

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
