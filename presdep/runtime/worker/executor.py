"""Snakemake's local executor, with each Python ``script:`` job run by the warm worker.

Everything else is Snakemake's own: the job is prepared, benchmarked (``run_wrapper`` writes the
benchmark file), logged and reported as a local job; only the step that would start ``python
.snakemake/scripts/tmpXXXX.py`` asks the worker to fork a child for that same file instead. Jobs the
worker does not take (shell, run, notebooks, conda or container deployments, shadow rules, groups)
and jobs it refuses (its imports no longer match the code or environment) run exactly as before,
the refusals with a warning. The benchmark samples the child as Snakemake samples a fresh job, then
takes its CPU seconds and peak RSS from the child's own accounting (wait4), which misses nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from contextlib import nullcontext

from snakemake.benchmark import benchmarked
from snakemake.executors.local import Executor as LocalExecutor
from snakemake.executors.local import common_settings as local_settings
from snakemake.executors.local import run_wrapper
from snakemake.logging import logger
from snakemake.script import PythonScript, get_source
from snakemake.sourcecache import SourceCache

from presdep.runtime.worker.client import JobEnd, WorkerClient, WorkerUnavailable
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


class _WorkerScript(PythonScript):
    """Snakemake's Python script (same preamble, same file), executed by the worker."""

    worker: WorkerClient

    def execute_script(self, fname, edit=False):
        env = job_environment(self.threads, self.resources)
        record = self.bench_record

        def watch(pid: int):
            return benchmarked(pid, record) if record is not None else nullcontext()

        try:
            end = self.worker.run(os.path.abspath(fname), os.getcwd(), env, watch)
        except WorkerUnavailable as why:
            logger.warning(f"presdep worker: {why}; rule {self.rulename} runs in a fresh process")
            return super().execute_script(fname, edit)
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

    def __init__(self, rule, worker: WorkerClient, config):
        self.name, self.script, self._worker, self._config = rule.name, rule.script, worker, config

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
        script.worker = self._worker
        script.evaluate()


class Executor(LocalExecutor):
    def __post_init__(self):
        super().__post_init__()
        self._worker: WorkerClient | None = None
        self._worker_lock = threading.Lock()

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
        if not self._script_job(job):
            return super().run_single_job(job)
        args = self.job_args_and_prepare(job)
        conda_env, container_img, env_modules = args[11], args[12], args[14]
        if conda_env is not None or container_img is not None or env_modules is not None:
            return self.pool.submit(self.cached_or_run, job, run_wrapper, *args)  # its own Python
        rule = _ScriptRule(job.rule, self._the_worker(), self.workflow.config)
        return self.pool.submit(self.cached_or_run, job, run_wrapper, rule, *args[1:])

    def _stop_worker(self):
        with self._worker_lock:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None

    def shutdown(self):
        super().shutdown()
        self._stop_worker()

    def cancel(self):
        self._stop_worker()
        super().cancel()
