"""The warm worker: a real worker process forks each job; what the job sees and how it ends must be
what ``python script`` gives it, and the worker must refuse what it cannot serve faithfully."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from worker_jobs import ENV, job_script

from presdep.runtime.worker.client import WorkerClient, WorkerUnavailable
from presdep.runtime.worker.server import fork_hazards



@pytest.fixture(scope="module")
def worker():
    client = WorkerClient(env=ENV)
    client.wait_ready()
    yield client
    client.stop()



def _run(worker, tmp_path, body, env=None, **kw):
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(os.devnull) as stdin, open(out, "w") as o, open(err, "w") as e:
        end = worker.run(job_script(tmp_path, body), str(tmp_path), env or dict(ENV), stdio=(stdin.fileno(),
                         o.fileno(), e.fileno()), **kw)
    return end, out.read_text(), err.read_text()


def test_a_job_gets_its_folder_environment_stdio_and_argv(worker, tmp_path):
    env = dict(ENV, OMP_NUM_THREADS="2", TMPDIR=str(tmp_path))
    end, out, err = _run(worker, tmp_path, """
        import os, sys, tempfile
        print(os.getcwd(), os.environ["TMPDIR"], sys.argv[0] == __file__, sys.path[0] == os.path.dirname(__file__))
        print("to stderr", file=sys.stderr)
        print(os.getpgid(0) == os.getpid(), sys.stdin.read() == "")
    """, env=env)
    assert end.exit == 0
    assert out.splitlines() == [f"{tmp_path} {tmp_path} True True", "True True"]
    assert err == "to stderr\n"


def test_exit_codes_are_pythons(worker, tmp_path):
    assert _run(worker, tmp_path, "import sys; sys.exit(3)")[0].exit == 3
    end, _, err = _run(worker, tmp_path, "raise ValueError('boom')")
    assert end.exit == 1 and "ValueError: boom" in err
    end, _, err = _run(worker, tmp_path, "import sys; sys.exit('no input')")
    assert end.exit == 1 and err == "no input\n"
    assert _run(worker, tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")[0].exit == -9


def test_torch_threads_are_those_a_fresh_job_would_read(worker, tmp_path):
    body = "import torch; print(torch.get_num_threads())"
    for threads in ("1", "2"):
        env = dict(ENV, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        end, out, _ = _run(worker, tmp_path, body, env=env)
        fresh = subprocess.run([sys.executable, "-c", body], env=env, capture_output=True, text=True, check=True)
        assert end.exit == 0 and out == fresh.stdout == f"{threads}\n"


def test_the_child_reports_its_own_cpu_and_memory(worker, tmp_path):
    end, _, _ = _run(worker, tmp_path, """
        import time
        block = bytearray(200 * 2**20)  # touched below, so resident
        for i in range(0, len(block), 4096):
            block[i] = 1
        t = time.process_time()
        while time.process_time() - t < 0.5:
            pass
    """)
    assert end.exit == 0 and end.cpu_s >= 0.5 and end.max_rss_mb >= 200 and end.wall_s >= 0.5


def test_an_environment_other_than_the_workers_is_refused(worker, tmp_path):
    with pytest.raises(WorkerUnavailable, match="environment differs.*PRESDEP_PROBE"):
        _run(worker, tmp_path, "pass", env=dict(ENV, PRESDEP_PROBE="1"))
    # the variables Snakemake sets per job are not a difference
    env = dict(ENV, OMP_NUM_THREADS="7", OPENBLAS_NUM_THREADS="7", TMPDIR="/tmp")
    assert _run(worker, tmp_path, "pass", env=env)[0].exit == 0


def test_another_python_is_refused(worker, tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "python", "/usr/bin/python3-other")
    with pytest.raises(WorkerUnavailable, match="the job's Python is /usr/bin/python3-other"):
        _run(worker, tmp_path, "pass")


def test_code_changed_since_the_worker_loaded_is_refused(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    client = WorkerClient(env=dict(ENV, PYTHONPATH=str(lib)))
    try:
        client.wait_ready()
        assert _run(client, tmp_path, "pass", env=dict(ENV, PYTHONPATH=str(lib)))[0].exit == 0
        (lib / "newly_installed.py").write_text("")  # a folder on the worker's sys.path changed
        with pytest.raises(WorkerUnavailable, match="changed since it started"):
            _run(client, tmp_path, "pass", env=dict(ENV, PYTHONPATH=str(lib)))
    finally:
        client.stop()


def test_a_thread_in_the_worker_is_a_fork_hazard():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert any("threads" in h for h in fork_hazards())
    finally:
        stop.set()
        t.join()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _gone(pids, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def test_stop_kills_the_running_jobs(tmp_path):
    client = WorkerClient(env=ENV)
    client.wait_ready()
    pids = []
    runner = threading.Thread(target=lambda: _run_quietly(client, tmp_path, pids))
    runner.start()
    deadline = time.monotonic() + 30
    while not pids and time.monotonic() < deadline:
        time.sleep(0.02)
    client.stop()
    runner.join(15)
    assert pids and _gone([pids[0], client.process.pid])


def _run_quietly(client, tmp_path, pids):
    def watch(pid):
        pids.append(pid)
        from contextlib import nullcontext
        return nullcontext()
    try:
        client.run(job_script(tmp_path, "import time; time.sleep(120)"), str(tmp_path), dict(ENV), watch)
    except RuntimeError:
        pass  # the worker died while the job ran: what stop does


PARENT = """
import os, sys, threading, time
from presdep.runtime.worker.client import WorkerClient
client = WorkerClient()
client.wait_ready()
def watch(pid):
    print(client.process.pid, pid, flush=True)
    from contextlib import nullcontext
    return nullcontext()
threading.Thread(target=client.run, args=(sys.argv[1], os.getcwd(), dict(os.environ), watch), daemon=True).start()
time.sleep(300)
"""


def test_the_worker_and_its_jobs_die_with_a_killed_parent(tmp_path):
    job = job_script(tmp_path, "import time; time.sleep(300)")
    parent = subprocess.Popen([sys.executable, "-c", PARENT, job], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        worker_pid, job_pid = map(int, parent.stdout.readline().split())
        assert _alive(worker_pid) and _alive(job_pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _gone([worker_pid, job_pid])
    finally:
        if parent.poll() is None:
            parent.kill()


def test_the_workers_own_settings_are_not_a_difference_and_a_users_are_kept():
    from presdep.runtime.worker import protocol

    user = {"PATH": "/bin", "JE_ARROW_MALLOC_CONF": "narenas:2"}
    started = protocol.worker_environment(user)
    assert started["OPENBLAS_NUM_THREADS"] == "1" and started["JE_ARROW_MALLOC_CONF"] == "narenas:2"
    assert protocol.environment_as_started(started) == user
    assert protocol.environment_differences(user, protocol.environment_as_started(started)) == []
