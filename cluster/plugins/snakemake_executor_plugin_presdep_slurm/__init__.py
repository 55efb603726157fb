"""Snakemake executor plugin ``presdep-slurm``: Snakemake's Slurm executor, whose group jobs run their
members through the presdep worker inside the allocation.

The Slurm plugin submits each job or group with sbatch and, inside the allocation, runs Snakemake with
``--executor slurm-jobstep --jobs 1``: a group's members run one at a time, each through its own
``srun``, a second Snakemake that parses the workflow again, and a fresh Python that imports torch
again. This executor submits exactly as the Slurm plugin does (same sbatch options, status checks,
logs and settings, the settings under the prefix ``presdep-slurm-``) and changes only what a group
runs inside its allocation: Snakemake with ``presdep-worker`` (presdep/runtime/worker), the local
executor whose Python jobs fork from one warm process, running the members side by side on the
cores Slurm gave the group. A job of its own runs as the Slurm plugin runs it: one Python job does
not repay the worker's imports.

What a group gives up is ``srun``'s step per member: its members share the allocation's cgroup, and
each sees every GPU Slurm gave the group (as in a local run), so a GPU group should be one GPU-wide.
Snakemake finds this plugin only in the cluster venv (cluster/slurm-venv.sh puts this folder on its
path), since it imports the Slurm plugin."""

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings, common_settings
from snakemake_interface_common.exceptions import WorkflowError

__all__ = ["Executor", "ExecutorSettings", "common_settings"]

INNER_EXECUTOR = "presdep-worker"


class Executor(SlurmExecutor):
    def __post_init__(self, test_mode: bool = False):
        super().__post_init__(test_mode)
        if self.array_jobs:
            # An array task's command comes from the jobstep plugin's own option.
            raise WorkflowError("presdep-slurm: array jobs need the slurm executor (drop presdep-slurm-array-jobs)")

    def format_job_exec(self, job) -> str:
        call = super().format_job_exec(job)
        if not job.is_group():
            return call
        jobstep = super().additional_general_args()
        if jobstep not in call:
            raise WorkflowError(f"presdep-slurm: the Slurm plugin's inner executor ({jobstep!r}) is not in the "
                                f"job's command; this plugin version is not supported:\n{call}")
        return call.replace(jobstep, f"--executor {INNER_EXECUTOR}", 1)
