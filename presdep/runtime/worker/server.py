"""The worker process: imports the heavy libraries once, then forks one child per job it is asked
to run and reports how the child ended (exit code, CPU seconds, peak memory).

    python -m presdep.runtime.worker.server SOCKET PARENT_PID [--request-timeout S] [--preload M,...]

Single-threaded on purpose: a fork copies only the forking thread, so the worker starts no thread
pool and no CUDA (it checks both before every fork and refuses jobs otherwise). One selector loop
serves everyone: requests are read as their bytes arrive, checked before anything acts on them (a
bad one gets an error, to its client alone) and cut off when not complete within a few seconds. It
stops when its parent (Snakemake) is gone, on SIGTERM (telling its jobs' clients that SIGTERM
stopped them) or on a ``stop`` message, killing the jobs it still runs."""

from __future__ import annotations

import argparse
import importlib
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass

from presdep.contracts.errors import InvalidInput
from presdep.runtime.worker import child, protocol

# What a job would otherwise import for 5-8 CPU-s: torch, transformers' modeling stack (which
# always pulls torch._dynamo and torch.distributed.tensor) and the model classes the configs name;
# pyarrow (with pandas, which its tables load) and scipy.stats for the Parquet and metrics jobs.
# Not polars (it starts allocator and spill threads when imported; 0.1 s a job) nor matplotlib
# (it fixes its configuration folder when imported, and each job sets its own).
PRELOAD = (
    "numpy",
    "pyarrow",
    "pyarrow.parquet",
    "pandas",
    "scipy.stats",
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.llama.modeling_llama",
    "transformers.models.qwen3.modeling_qwen3",
    "tokenizers",
    "safetensors.torch",
    "peft",
)
_PARENT_POLL_S = 0.5
# How long a connection may take to deliver its whole request: a client that sends nothing, or a
# byte now and then, is cut off after this and never holds up anyone else meanwhile.
REQUEST_TIMEOUT_S = 5.0
_ANSWER_TIMEOUT_S = 2.0  # an answer is a few hundred bytes: a socket buffer takes it at once


@dataclass
class _Job:
    pid: int
    pidfd: int
    conn: socket.socket
    started: float


@dataclass
class _Incoming:
    """A connection whose request has not fully arrived yet."""

    conn: socket.socket
    reader: protocol.MessageReader
    deadline: float


def preload(modules=PRELOAD) -> float:
    t0 = time.process_time()
    for name in modules:
        importlib.import_module(name)
    return time.process_time() - t0


def fork_hazards() -> list[str]:
    """Why forking now would hand a child a broken process (empty when it is safe)."""
    hazards = []
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        hazards.append(f"the worker runs {threads} threads")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        hazards.append("the worker initialised CUDA")
    return hazards


class Worker:
    def __init__(self, socket_path: str, parent: int, preload_s: float, env: dict[str, str],
                 request_timeout_s: float = REQUEST_TIMEOUT_S):
        self.parent, self.preload_s = parent, preload_s
        self.env = env  # as started: imports may add variables of their own (torch does)
        self.python = os.path.realpath(sys.executable)
        self.stamp = protocol.code_stamp()
        self.request_timeout_s = request_timeout_s
        self.jobs: dict[int, _Job] = {}
        self.incoming: dict[socket.socket, _Incoming] = {}
        self.stopping = False
        self.stopped_by: str | None = None  # the signal that stopped the worker, told to its jobs' clients
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_path)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, self._stop_on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches Snakemake, which stops us
        try:
            while not self.stopping and os.getppid() == self.parent:
                for key, _ in self.selector.select(timeout=self._wait_s()):
                    if key.fileobj is self.listener:
                        self._accept()
                    elif isinstance(key.data, _Job):
                        self._finish(key.data)
                    else:
                        self._read(key.data)
                self._cut_off_late_requests()
        finally:
            self._kill_all()

    def _stop_on_signal(self, signum, _frame) -> None:
        self.stopping, self.stopped_by = True, signal.Signals(signum).name

    def _wait_s(self) -> float:
        """Until the next check of the parent, or the next request deadline if that is sooner."""
        deadlines = [pending.deadline for pending in self.incoming.values()]
        return max(0.0, min([_PARENT_POLL_S, *(d - time.monotonic() for d in deadlines)]))

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return  # the client gave up before we got to it
        conn.setblocking(False)
        pending = _Incoming(conn, protocol.MessageReader(), time.monotonic() + self.request_timeout_s)
        self.incoming[conn] = pending
        self.selector.register(conn, selectors.EVENT_READ, pending)
        self._read(pending)  # a prompt client's request is usually there already

    def _read(self, pending: _Incoming) -> None:
        try:
            if not pending.reader.read(pending.conn):
                return  # more is on its way; the deadline bounds how long we listen
            request = protocol.validate_request(pending.reader.message, len(pending.reader.fds))
        except InvalidInput as bad:
            self._drop(pending, f"bad request: {bad}")
            return
        except OSError:  # the client closed or reset its end: nobody to answer
            self._drop(pending, None)
            return
        self._forget(pending)
        pending.conn.setblocking(True)
        pending.conn.settimeout(_ANSWER_TIMEOUT_S)
        self._act(request, pending.conn, pending.reader.fds)

    def _cut_off_late_requests(self) -> None:
        now = time.monotonic()
        for pending in [p for p in self.incoming.values() if p.deadline <= now]:
            self._drop(pending, f"no complete request within {self.request_timeout_s:g} s")

    def _forget(self, pending: _Incoming) -> None:
        self.selector.unregister(pending.conn)
        del self.incoming[pending.conn]

    def _drop(self, pending: _Incoming, error: str | None) -> None:
        """End a connection whose request cannot be served, telling the client why if it listens."""
        self._forget(pending)
        pending.reader.close_fds()
        if error is not None:
            pending.conn.setblocking(True)
            pending.conn.settimeout(_ANSWER_TIMEOUT_S)
            _answer(pending.conn, {"error": error})
        pending.conn.close()

    def _act(self, request: dict, conn: socket.socket, fds: list[int]) -> None:
        if request["op"] != "run":
            if request["op"] == "stop":
                self.stopping = True
            else:
                _answer(conn, {"ready": True, "preload_s": self.preload_s, "pid": os.getpid()})
            conn.close()
            return
        refusal = self._refusal(request)
        if refusal:
            for fd in fds:
                os.close(fd)
            _answer(conn, {"refused": refusal})
            conn.close()
            return
        self._fork(request, conn, fds)

    def _fork(self, request: dict, conn: socket.socket, fds: list[int]) -> None:
        try:
            pid = os.fork()
        except OSError as error:  # out of processes or memory: the job runs as usual instead
            for fd in fds:
                os.close(fd)
            _answer(conn, {"refused": f"the worker could not fork: {error}"})
            conn.close()
            return
        if pid == 0:
            try:  # whatever happens here, the child must never return into the worker's loop
                self.selector.close()
                self.listener.close()
                conn.close()
                for other in [*self.jobs.values(), *self.incoming.values()]:
                    other.conn.close()
                for job in self.jobs.values():
                    os.close(job.pidfd)
                child.run_job(request["script"], request["cwd"], request["env"], fds)
            finally:
                os._exit(1)
        for fd in fds:
            os.close(fd)
        job = _Job(pid, os.pidfd_open(pid), conn, time.monotonic())
        self.jobs[pid] = job
        self.selector.register(job.pidfd, selectors.EVENT_READ, job)
        _answer(conn, {"pid": pid})  # a client gone by now still gets its job's end sent, unread

    def _refusal(self, request: dict) -> str:
        """Why this worker must not run the job (empty when it may)."""
        if os.path.realpath(request["python"]) != self.python:
            return f"the job's Python is {request['python']}, the worker's {self.python}"
        changed = protocol.environment_differences(request["env"], self.env)
        if changed:
            return "the job's environment differs from the worker's in " + ", ".join(changed[:5])
        edited = protocol.stamp_differences(protocol.code_stamp(self.stamp), self.stamp)
        if edited:
            return f"{len(edited)} file(s) the worker imported changed since it started, e.g. {edited[0]}"
        return "; ".join(fork_hazards())

    def _finish(self, job: _Job) -> None:
        _, status, usage = os.wait4(job.pid, 0)
        self.selector.unregister(job.pidfd)
        os.close(job.pidfd)
        del self.jobs[job.pid]
        _answer(job.conn, {
            "exit": os.waitstatus_to_exitcode(status),
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_kb": usage.ru_maxrss,
            "read_bytes": usage.ru_inblock * 512,
            "write_bytes": usage.ru_oublock * 512,
            "wall_s": time.monotonic() - job.started,
        })
        job.conn.close()

    def _kill_all(self) -> None:
        for job in list(self.jobs.values()):
            kill_job(job.pid)
            os.waitpid(job.pid, 0)
            if self.stopped_by is not None:  # so the job reads as stopped by the user, not as a crash
                _answer(job.conn, {"stopped": self.stopped_by})
            job.conn.close()
        for pending in list(self.incoming.values()):
            self._drop(pending, "the worker is stopping")
        self.listener.close()


def _answer(conn: socket.socket, message: dict) -> None:
    try:
        protocol.send(conn, message)
    except OSError:
        pass  # the client is gone or does not read: nobody waits for this answer any more


def kill_job(pid: int) -> None:
    """SIGKILL to the job's process group and to the job itself (before its setpgid it has none)."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m presdep.runtime.worker.server")
    parser.add_argument("socket")
    parser.add_argument("parent", type=int, help="the process whose end ends the worker")
    parser.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT_S,
                        help="seconds a connection has to deliver its whole request")
    parser.add_argument("--preload", type=lambda names: tuple(filter(None, names.split(","))), default=PRELOAD,
                        help="the modules to import once, comma-separated (default: PRELOAD)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    env = protocol.environment_as_started(os.environ)
    # `-m` put the worker's own folder (where its socket appears) first on sys.path; a job puts its
    # script's folder there instead (child.run_job).
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.realpath(os.getcwd()):
        del sys.path[0]
    preload_s = preload(args.preload)
    hazards = fork_hazards()
    if hazards:
        print(f"presdep worker: not serving: {'; '.join(hazards)}", file=sys.stderr)
        return 3
    worker = Worker(args.socket, args.parent, preload_s, env, args.request_timeout)
    try:
        worker.serve()
    finally:
        try:
            os.unlink(args.socket)
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
