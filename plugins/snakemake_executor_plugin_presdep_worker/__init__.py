"""Snakemake executor plugin ``presdep-worker``: local execution, with the workflow's Python jobs
forked from one warm process (presdep/runtime/worker). ``make env`` puts this folder on the venv's
path, where Snakemake looks for plugins: ``snakemake --executor presdep-worker ...``."""

from presdep.runtime.worker.executor import Executor, common_settings

__all__ = ["Executor", "common_settings"]
