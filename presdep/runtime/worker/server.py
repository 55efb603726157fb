"""The worker process: imports the heavy libraries once, then forks one child per job it is asked
to run and reports how the child ended (exit code, CPU seconds, peak memory).

    python -m presdep.runtime.worker.server SOCKET PARENT_PID

Single-threaded on purpose: a fork copies only the forking thread, so the worker starts no thread
pool and no CUDA (it checks both before every fork and refuses jobs otherwise). It stops when its
parent (Snakemake) is gone, on SIGTERM or on a ``stop`` message, killing the jobs it still runs."""

from __future__ import annotations

import importlib
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass

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
_REQUEST_TIMEOUT_S = 10.0


@dataclass
class _Job:
    pid: int
    pidfd: int
    conn: socket.socket
    started: float


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
    def __init__(self, socket_path: str, parent: int, preload_s: float, env: dict[str, str]):
        self.parent, self.preload_s = parent, preload_s
        self.env = env  # as started: imports may add variables of their own (torch does)
        self.python = os.path.realpath(sys.executable)
        self.stamp = protocol.code_stamp()
        self.jobs: dict[int, _Job] = {}
        self.stopping = False
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_path)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches Snakemake, which stops us
        try:
            while not self.stopping and os.getppid() == self.parent:
                for key, _ in self.selector.select(timeout=_PARENT_POLL_S):
                    if key.fileobj is self.listener:
                        self._accept()
                    else:
                        self._finish(key.data)
        finally:
            self._kill_all()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(_REQUEST_TIMEOUT_S)  # a client that connects and says nothing cannot stall us
        try:
            request, fds = protocol.receive(conn, max_fds=3)
        except (OSError, ValueError):
            conn.close()
            return
        conn.settimeout(None)
        if request is None or request.get("op") != "run":
            if request is not None and request.get("op") == "stop":
                self.stopping = True
            elif request is not None and request.get("op") == "hello":
                protocol.send(conn, {"ready": True, "preload_s": self.preload_s, "pid": os.getpid()})
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        refusal = self._refusal(request)
        if refusal or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            protocol.send(conn, {"refused": refusal or f"expected 3 descriptors, got {len(fds)}"})
            conn.close()
            return
        pid = os.fork()
        if pid == 0:
            self.selector.close()
            self.listener.close()
            conn.close()
            for job in self.jobs.values():
                job.conn.close()
                os.close(job.pidfd)
            child.run_job(request["script"], request["cwd"], request["env"], fds)
        for fd in fds:
            os.close(fd)
        job = _Job(pid, os.pidfd_open(pid), conn, time.monotonic())
        self.jobs[pid] = job
        self.selector.register(job.pidfd, selectors.EVENT_READ, job)
        protocol.send(conn, {"pid": pid})

    def _refusal(self, request: dict) -> str:
        """Why this worker must not run the job (empty when it may)."""
        if os.path.realpath(request.get("python", "")) != self.python:
            return f"the job's Python is {request.get('python')}, the worker's {self.python}"
        changed = protocol.environment_differences(request.get("env", {}), self.env)
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
        try:
            protocol.send(job.conn, {
                "exit": os.waitstatus_to_exitcode(status),
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "max_rss_kb": usage.ru_maxrss,
                "read_bytes": usage.ru_inblock * 512,
                "write_bytes": usage.ru_oublock * 512,
                "wall_s": time.monotonic() - job.started,
            })
        except OSError:
            pass  # the executor is gone; nobody waits for this job any more
        job.conn.close()

    def _kill_all(self) -> None:
        for job in list(self.jobs.values()):
            kill_job(job.pid)
            os.waitpid(job.pid, 0)
        self.listener.close()


def kill_job(pid: int) -> None:
    """SIGKILL to the job's process group and to the job itself (before its setpgid it has none)."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: list[str] | None = None) -> int:
    socket_path, parent = (argv if argv is not None else sys.argv[1:])[:2]
    env = protocol.environment_as_started(os.environ)
    # `-m` put the worker's own folder (where its socket appears) first on sys.path; a job puts its
    # script's folder there instead (child.run_job).
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.realpath(os.getcwd()):
        del sys.path[0]
    preload_s = preload()
    hazards = fork_hazards()
    if hazards:
        print(f"presdep worker: not serving: {'; '.join(hazards)}", file=sys.stderr)
        return 3
    worker = Worker(socket_path, int(parent), preload_s, env)
    try:
        worker.serve()
    finally:
        try:
            os.unlink(socket_path)
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
