"""A job that the user's SIGINT or SIGTERM stopped reports "stopped by the user (SIG...); resume
with `make resume`", not a crash: whether the signal reached the job, the worker, or Snakemake
(which then stops the worker)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext

import pytest
from worker_jobs import ENV, job_script, light_worker

from presdep.runtime.worker import executor as worker_executor
from presdep.runtime.worker.executor import Executor, run_in_worker
from presdep.runtime.worker.interruption import JobStopped, SignalRecord, StoppedByUser, stop_line




@pytest.fixture(scope="module")
def worker():
    client = light_worker()
    yield client
    client.stop()



def test_the_line_names_the_signal():
    assert stop_line("SIGINT") == "stopped by the user (SIGINT); resume with `make resume`"
    assert stop_line(None) == "stopped by the user (SIGINT/SIGTERM); resume with `make resume`"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_job_that_got_the_signal_itself_reports_the_stop(worker, tmp_path, monkeypatch, sig):
    monkeypatch.chdir(tmp_path)
    job = job_script(tmp_path, f"import os, signal, time; os.kill(os.getpid(), signal.{sig}); time.sleep(30)")
    # The run goes on (only the job was signalled): Snakemake shows the line as the rule's error.
    with pytest.raises(JobStopped) as stopped:
        run_in_worker(worker, job, dict(ENV), lambda pid: nullcontext(), "score")
    assert str(stopped.value) == f"stopped by the user ({sig}); resume with `make resume`"
    # The run stops too: the job ends quietly, as Snakemake's own jobs do on Ctrl-C.
    with pytest.raises(StoppedByUser, match=rf"stopped by the user \({sig}\); resume with `make resume`"):
        run_in_worker(worker, job, dict(ENV), lambda pid: nullcontext(), "score", interrupted=lambda: sig)


def _stop_while_a_job_runs(tmp_path, stop, interrupted=lambda: None):
    """Run a long job on a worker of its own and call ``stop(client)`` once it runs; the error it ends with."""
    client = light_worker()
    running = threading.Event()

    def watch(pid):
        running.set()
        return nullcontext()

    try:
        threading.Thread(target=lambda: running.wait(30) and stop(client), daemon=True).start()
        with pytest.raises(BaseException) as ended:
            run_in_worker(client, job_script(tmp_path, "import time; time.sleep(60)"), dict(ENV), watch, "score",
                          interrupted)
        return ended.value
    finally:
        client.stop()


def test_a_job_of_a_worker_stopped_by_sigterm_reports_the_stop(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ended = _stop_while_a_job_runs(tmp_path, lambda client: client.process.send_signal(signal.SIGTERM))
    assert isinstance(ended, JobStopped) and str(ended) == "stopped by the user (SIGTERM); resume with `make resume`"


def test_a_job_of_a_run_stopped_by_ctrl_c_ends_quietly_with_the_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Ctrl-C reaches Snakemake, whose cancel stops the worker while the job runs.
    ended = _stop_while_a_job_runs(tmp_path, lambda client: client.stop(), interrupted=lambda: "SIGINT")
    assert isinstance(ended, StoppedByUser) and str(ended) == "stopped by the user (SIGINT); resume with `make resume`"


@pytest.fixture
def user_signal_handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_the_record_notes_the_signal_and_hands_it_on(user_signal_handlers):
    handled = []
    signal.signal(signal.SIGTERM, lambda signum, frame: handled.append(signum))  # as Snakemake's graceful exit
    signal.signal(signal.SIGINT, signal.default_int_handler)
    record = SignalRecord()
    record.install()
    os.kill(os.getpid(), signal.SIGTERM)
    assert record.received == "SIGTERM" and handled == [signal.SIGTERM]
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    assert record.received == "SIGTERM", "the first signal is the one that stopped the run"


class _Plan:
    """The part of Snakemake's DAG the stop path reads: the needed jobs not finished yet."""

    def __init__(self, unfinished: list[str]):
        self.unfinished = unfinished

    def needrun_jobs(self):
        return iter(self.unfinished)


def _bare_executor(received: str | None, unfinished=("score",)) -> Executor:
    """The executor's stop path, without a workflow: no worker started, an empty pool."""
    ex = object.__new__(Executor)
    ex._worker, ex._worker_lock, ex.pool = None, threading.Lock(), ThreadPoolExecutor(1)
    ex._signals, ex._stop_reported, ex._cancelled = SignalRecord(), False, False
    ex._signals.received = received
    ex.dag = _Plan(list(unfinished))
    return ex


def test_a_stopped_run_says_so_once_and_again_last(caplog, monkeypatch):
    at_exit = []
    monkeypatch.setattr(worker_executor.atexit, "register", lambda fn, *args: at_exit.append((fn, args)))
    ex = _bare_executor("SIGTERM")
    with caplog.at_level(logging.INFO):
        ex.shutdown()
        ex.cancel()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["stopped by the user (SIGTERM); resume with `make resume`"]
    assert at_exit == [(worker_executor._say_last, ("stopped by the user (SIGTERM); resume with `make resume`",))]


class _Scheduler:
    def __init__(self):
        self.errors = []

    def error_callback(self, job):
        self.errors.append(job)


def _ended_by(exception: BaseException) -> Future:
    future = Future()
    future.set_exception(exception)
    return future


def test_a_job_stopped_while_the_run_stops_gracefully_is_told_to_the_scheduler_quietly(caplog):
    # SIGTERM: Snakemake waits for its running jobs; one the user's stop ended must count as ended.
    ex = _bare_executor("SIGTERM")
    ex.workflow = type("Workflow", (), {"scheduler": _Scheduler()})()
    job_info = type("JobInfo", (), {"job": "score"})()
    with caplog.at_level(logging.INFO):
        ex._callback(job_info, _ended_by(StoppedByUser(stop_line("SIGTERM"))))
    assert ex.workflow.scheduler.errors == ["score"] and caplog.records == []


@pytest.mark.parametrize("received, unfinished", [(None, ["score"]), ("SIGINT", [])],
                         ids=["no signal", "a signal as the last job ended"])
def test_a_run_nobody_stopped_says_nothing(caplog, monkeypatch, received, unfinished):
    at_exit = []
    monkeypatch.setattr(worker_executor.atexit, "register", lambda fn, *args: at_exit.append(fn))
    with caplog.at_level(logging.INFO):
        _bare_executor(received, unfinished).shutdown()
    assert caplog.records == [] and at_exit == []


def test_an_ignored_signal_is_no_stop(user_signal_handlers):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as for a run started in the background by a script
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    record = SignalRecord()
    record.install()
    os.kill(os.getpid(), signal.SIGINT)
    assert record.received is None and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
