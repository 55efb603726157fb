"""Snakemake's local executor, with each Python ``script:`` job run by the warm worker.

Everything else is Snakemake's own: the job is prepared, benchmarked (``run_wrapper`` writes the
benchmark file), logged and reported as a local job; only the step that would start ``python
.snakemake/scripts/tmpXXXX.py`` asks the worker to fork a child for that same file instead. Jobs the
worker does not take (shell, run, notebooks, conda or container deployments, shadow rules, groups)
and jobs it refuses (its imports no longer match the code or environment) run exactly as before,
the refusals with a warning; so does every job once the worker is gone (one warning says so). A
job that the user's SIGINT or SIGTERM stopped says so (interruption.py) rather than read as a crash.
The benchmark samples the child as Snakemake samples a fresh job, then takes its CPU seconds and
peak RSS from the child's own accounting (wait4), which misses nothing."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import NoReturn

from snakemake.benchmark import benchmarked
from snakemake.executors.local import Executor as LocalExecutor
from snakemake.executors.local import common_settings as local_settings
from snakemake.executors.local import run_wrapper
from snakemake.logging import logger
from snakemake.script import PythonScript, get_source
from snakemake.sourcecache import SourceCache

from presdep.runtime.worker.client import JobEnd, WorkerClient, WorkerGone, WorkerUnavailable
from presdep.runtime.worker.interruption import JobStopped, SignalRecord, StoppedByUser, stop_line, user_signal_of
from presdep.runtime.worker.protocol import THREAD_VARIABLES, TMPDIR_VARIABLES

common_settings = local_settings


def job_environment(threads: int, resources) -> dict[str, str]:
    """The environment Snakemake's shell() gives a job: this process's, with its thread counts."""
    env = dict(os.environ)
    env.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    tmpdir = resources.get("tmpdir") if resources is not None else None
    if tmpdir:
        env.update(dict.fromkeys(TMPDIR_VARIABLES, tmpdir))
    return env


def run_in_worker(worker: WorkerClient, script: str, env: dict[str, str],
                  watch: Callable[[int], AbstractContextManager], rulename: str,
                  interrupted: Callable[[], str | None] = lambda: None) -> JobEnd | None:
    """The job's end in the worker, or None when it must run in a fresh process instead (a
    warning says why: once for a worker that is gone, once per job it refuses). ``interrupted()``
    names the signal by which the user is stopping the whole run, if any. A job a user's signal
    stopped raises StoppedByUser while the run stops with it (Snakemake then reports no rule
    error), else JobStopped, whose text is the stopped-by-the-user line."""
    try:
        end = worker.run(script, os.getcwd(), env, watch)
    except WorkerGone as gone:
        if gone.first:
            logger.warning(f"presdep worker: {gone}; rule {rulename} and later Python jobs run in fresh processes")
        return None
    except WorkerUnavailable as why:
        logger.warning(f"presdep worker: {why}; rule {rulename} runs in a fresh process")
        return None
    except JobStopped as stop:
        _raise_stopped(stop.signal_name, interrupted(), stop)
    signal_name = user_signal_of(end.exit)  # the child alone got the signal
    if signal_name is not None:
        _raise_stopped(signal_name, interrupted(), JobStopped(signal_name))
    return end


def _raise_stopped(job_signal: str | None, run_signal: str | None, stop: JobStopped) -> NoReturn:
    if run_signal is not None:
        raise StoppedByUser(stop_line(job_signal or run_signal)) from None
    raise stop from None  # the job alone was stopped: Snakemake reports it as the rule's error


class _WorkerScript(PythonScript):
    """Snakemake's Python script (same preamble, same file), executed by the worker."""

    worker: WorkerClient
    signals: SignalRecord

    def execute_script(self, fname, edit=False):
        env = job_environment(self.threads, self.resources)
        record = self.bench_record

        def watch(pid: int):
            return benchmarked(pid, record) if record is not None else nullcontext()

        end = run_in_worker(self.worker, os.path.abspath(fname), env, watch, self.rulename,
                            lambda: self.signals.received)
        if end is None:
            return super().execute_script(fname, edit)  # the command Snakemake runs without the worker
        if record is not None:
            _complete(record, end)
        if end.exit != 0:
            raise subprocess.CalledProcessError(end.exit, f"{sys.executable} {fname} (in the presdep worker)")


def _complete(record, end: JobEnd) -> None:
    """The child's own totals where sampling missed them (a job that ended between two samples)."""
    record.cpu_time = max(record.cpu_time or 0, end.cpu_s)
    record.max_rss = max(record.max_rss or 0, end.max_rss_mb)
    record.io_in = record.io_in if record.io_in is not None else end.read_bytes / 2**20
    record.io_out = record.io_out if record.io_out is not None else end.write_bytes / 2**20
    record.data_collected = True


class _ScriptRule:
    """The job's rule as ``run_wrapper`` sees it, whose run function hands the script to the worker."""

    shellcmd = wrapper = cwl = None

    def __init__(self, rule, worker: WorkerClient, config, signals: SignalRecord):
        self.name, self.script, self._worker, self._config = rule.name, rule.script, worker, config
        self._signals = signals

    def run_func(self, input, output, params, wildcards, threads, resources, log, rule, conda_env,
                 container_img, singularity_args, use_singularity, env_modules, bench_record, jobid,
                 is_shell, bench_iteration, cleanup_scripts, shadow_dir, edit_notebook, conda_base_path,
                 basedir, sourcecache_path, runtime_sourcecache_path, runtime_paths):
        # What snakemake.script.script() does for a Python file, with the worker's executor class.
        path, source, _language, is_local, cache_path = get_source(
            self.script, SourceCache(sourcecache_path, runtime_sourcecache_path), basedir, wildcards, params)
        script = _WorkerScript(
            path, cache_path, source, basedir, input, output, params, wildcards, threads, resources, log,
            self._config, rule, conda_env, conda_base_path, container_img, singularity_args, env_modules,
            bench_record, jobid, bench_iteration, cleanup_scripts, shadow_dir, is_local, runtime_paths)
        script.worker, script.signals = self._worker, self._signals
        script.evaluate()


class Executor(LocalExecutor):
    def __post_init__(self):
        super().__post_init__()
        self._worker: WorkerClient | None = None
        self._worker_lock = threading.Lock()
        self._signals = SignalRecord()  # installed at the first job, after Snakemake set its own handlers
        self._stop_reported = False
        self._cancelled = False  # Snakemake cancels on Ctrl-C (and on its own errors)

    def _script_job(self, job) -> bool:
        """A Python ``script:`` job that Snakemake would run in this process's thread pool."""
        rule = job.rule
        return (
            isinstance(rule.script, str) and rule.script.endswith(".py")
            and not job.is_group() and not job.is_shadow and not job.is_run and not job.is_template_engine
            and not self.dag.is_edit_notebook_job(job)
        )

    def _the_worker(self) -> WorkerClient:
        with self._worker_lock:  # started by the first job it serves, once per run
            if self._worker is None:
                self._worker = WorkerClient()
                logger.info(f"presdep worker: started (pid {self._worker.process.pid}); Python jobs fork from it")
            return self._worker

    def run_single_job(self, job):
        self._signals.install()
        if not self._script_job(job):
            return super().run_single_job(job)
        args = self.job_args_and_prepare(job)
        conda_env, container_img, env_modules = args[11], args[12], args[14]
        if conda_env is not None or container_img is not None or env_modules is not None:
            return self.pool.submit(self.cached_or_run, job, run_wrapper, *args)  # its own Python
        rule = _ScriptRule(job.rule, self._the_worker(), self.workflow.config, self._signals)
        return self.pool.submit(self.cached_or_run, job, run_wrapper, rule, *args[1:])

    def _stop_worker(self):
        with self._worker_lock:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None

    def _report_stop(self):
        """A run the user stopped says so: once as it stops, and once more as the process ends,
        after Snakemake's own closing "At least one job did not complete successfully". A signal
        that came as the last job ended stopped nothing: the run completed, and says nothing."""
        if self._signals.received is None or self._stop_reported or self._completed():
            return
        self._stop_reported = True
        line = stop_line(self._signals.received)
        logger.warning(line)
        atexit.register(_say_last, line)

    def _completed(self) -> bool:
        return next(iter(self.dag.needrun_jobs()), None) is None

    def _callback(self, job_info, future):
        # Snakemake's callback takes a KeyboardInterrupt from a job as part of its own Ctrl-C
        # stop: it prints nothing and tells the scheduler nothing, which has stopped already. A
        # run stopping gracefully (SIGTERM) still waits for the job: tell it, as quietly.
        if not self._cancelled and not future.cancelled() and isinstance(future.exception(), StoppedByUser):
            self.workflow.scheduler.error_callback(job_info.job)
            return
        super()._callback(job_info, future)

    def shutdown(self):
        super().shutdown()
        self._stop_worker()
        self._report_stop()

    def cancel(self):
        self._cancelled = True  # before the worker stops, for the callbacks of the jobs it stops
        self._stop_worker()
        super().cancel()
        self._report_stop()


def _say_last(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr is closed: the line logged during the stop has to do
