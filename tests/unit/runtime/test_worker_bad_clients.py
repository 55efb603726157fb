"""The worker against clients that misbehave: a request of the wrong JSON types gets an error and
the worker serves on; a client that sends slowly is cut off without holding up anyone else; a
worker that is gone leaves its jobs to fresh processes, with one warning."""

from __future__ import annotations

import array
import json
import logging
import os
import re
import select
import signal
import socket
import struct
import sys
import threading
from pathlib import Path

import pytest
from worker_jobs import ENV, job_script, light_worker

from presdep.contracts.errors import InvalidInput
from presdep.runtime.worker import protocol
from presdep.runtime.worker.client import WorkerClient
from presdep.runtime.worker.executor import _WorkerScript
from presdep.runtime.worker.interruption import SignalRecord

SLOW_REQUEST_TIMEOUT_S = 3.0  # the worker's REQUEST_TIMEOUT_S, for these tests



@pytest.fixture(scope="module")
def worker():
    client = light_worker(request_timeout_s=SLOW_REQUEST_TIMEOUT_S)
    yield client
    client.stop()



def _normal_job_runs(worker: WorkerClient, tmp_path: Path) -> bool:
    out = tmp_path / "normal.txt"
    with open(os.devnull) as stdin, open(out, "w") as o:
        end = worker.run(job_script(tmp_path, "print('fine')", "normal.py"), str(tmp_path), dict(ENV),
                         stdio=(stdin.fileno(), o.fileno(), o.fileno()))
    return end.exit == 0 and out.read_text() == "fine\n"


def _ask(worker: WorkerClient, body: bytes, with_stdio: bool) -> dict | None:
    """Send ``body`` well framed (with three descriptors, as a job request carries, if asked) and
    return the worker's answer."""
    with open(os.devnull) as null, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(worker.path)
        fds = array.array("i", [null.fileno()] * 3)
        sock.sendmsg([b"M"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)] if with_stdio else [])
        sock.sendall(struct.pack("!I", len(body)) + body)
        sock.settimeout(10)
        answer, _ = protocol.receive(sock)
    return answer


def _run_request(**fields) -> bytes:
    request = {"op": "run", "script": "/abs/job.py", "cwd": "/abs", "env": dict(ENV), "python": sys.executable}
    request.update(fields)
    return json.dumps({k: v for k, v in request.items() if v is not _DROP}).encode()


_DROP = object()
GARBAGE = {
    "an array": (b"[]", "must be a JSON object, got an array"),
    "null": (b"null", "must be a JSON object, got null"),
    "an unknown op": (b'{"op": "launch", "argv": ["python", "job.py"]}', "'op' must be one of hello, run, stop"),
    "missing keys": (_run_request(cwd=_DROP, env=_DROP), "needs the key(s) cwd, env"),
    "a number as script": (_run_request(script=7), "'script' must be a non-empty string without NUL, got a number 7"),
    "an unknown key (argv)": (_run_request(argv="python job.py"), "has no key 'argv'"),
    "env as a string": (_run_request(env="PATH=/bin"), "'env' must be an object of names to strings, got a string"),
    "env with a list value": (_run_request(env={"PATH": ["/bin"]}),
                              "'env'['PATH'] must be a string without NUL, got an array"),
    "a huge number as cwd": (b'{"op": "run", "cwd": ' + b"9" * 5000 + b"}", "body is not JSON"),
}


@pytest.mark.parametrize("what", GARBAGE)
def test_a_request_of_wrong_types_gets_an_error_and_the_worker_serves_on(worker, tmp_path, what):
    body, reason = GARBAGE[what]
    answer = _ask(worker, body, with_stdio=body.startswith(b'{"op": "run"'))
    assert answer is not None and answer["error"].startswith("bad request: ") and reason in answer["error"]
    assert worker.process.poll() is None and _normal_job_runs(worker, tmp_path)


def _send_slowly(path: str, started: threading.Event, events: list, max_bytes: int = 40) -> None:
    """The start of a well-framed request, then one byte every half second, until the worker
    answers (or ``max_bytes`` are sent); notes the answer in ``events``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(b"M" + struct.pack("!I", 1000))
        events.append("slow sender started")
        started.set()
        for _ in range(max_bytes):
            if select.select([sock], [], [], 0.5)[0]:
                answer, _ = protocol.receive(sock)
                events.append(("cut off", answer))
                return
            try:
                sock.send(b" ")
            except OSError:
                events.append(("cut off", None))
                return
        events.append("gave up")


def test_a_slow_sender_is_cut_off_and_holds_up_nobody(worker, tmp_path):
    events: list = []
    started = threading.Event()
    sender = threading.Thread(target=_send_slowly, args=(worker.path, started, events))
    sender.start()
    try:
        assert started.wait(10)
        assert _normal_job_runs(worker, tmp_path)
        events.append("job done")
    finally:
        sender.join(30)
    # The job ran while the sender still trickled; the sender was then cut off with a reason.
    assert events[:2] == ["slow sender started", "job done"]
    assert events[2][0] == "cut off"
    assert f"no complete request within {SLOW_REQUEST_TIMEOUT_S:g} s" in events[2][1]["error"]
    assert _normal_job_runs(worker, tmp_path)


def _worker_script(worker: WorkerClient) -> _WorkerScript:
    """Snakemake's Python script object as the executor builds it, with what its fresh-process
    path (Snakemake's own execute_script) reads."""
    script = object.__new__(_WorkerScript)
    script.worker, script.signals, script.rulename = worker, SignalRecord(), "score"
    for name in ("bench_record", "conda_env", "conda_base_path", "container_img", "shadow_dir", "env_modules",
                 "singularity_args", "runtime_paths"):
        setattr(script, name, None)
    script.threads, script.resources = 1, {}
    return script


@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM], ids=["socket left behind", "socket removed"])
def test_jobs_of_a_worker_that_is_gone_run_in_fresh_processes_with_one_warning(tmp_path, monkeypatch, caplog, kill):
    client = light_worker()
    try:
        client.process.send_signal(kill)
        client.process.wait(10)
        monkeypatch.chdir(tmp_path)
        script = _worker_script(client)
        for n in (1, 2):
            marker = tmp_path / f"ran{n}.txt"
            job = job_script(tmp_path, f"""
                import sys
                open({str(marker)!r}, "w").write(str("presdep.runtime.worker.child" in sys.modules))
            """, f"job{n}.py")
            with caplog.at_level(logging.WARNING):
                script.execute_script(job)
            assert marker.read_text() == "False"  # ran, and not in a child of a worker
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "the worker is gone" in warnings[0] and "fresh processes" in warnings[0]
    finally:
        client.stop()


@pytest.mark.parametrize("sent, reason", [
    (b"X" + struct.pack("!I", 2) + b"{}", "starts with the byte b'M', not b'X'"),
    (b"M" + struct.pack("!I", 2**31), f"at most {protocol.MAX_MESSAGE_BYTES:,} bytes, this one says 2,147,483,648"),
    (b"M" + struct.pack("!I", 5_000) + b"[" * 5_000, "body is not JSON"),  # nested past the recursion limit
])
def test_bytes_that_are_no_message_are_named(sent, reason):
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        theirs.sendall(sent)
        reader = protocol.MessageReader()
        with pytest.raises(InvalidInput, match=re.escape(reason)):
            while not reader.read(ours):
                select.select([ours], [], [], 5)
