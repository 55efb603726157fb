"""Fixtures shared by the workflow tests: one finished run of the embedded default's whole DAG at a
tiny size (test_default_dag.py, test_worker_workflow.py), and for the tests that need a real
cluster a local single-node Slurm and a venv with the Slurm executor plugin (test_slurm.py,
test_rehearsal.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_utils import REPO, TINY_DEFAULT, snakemake, tiny_default_workflow

START = REPO / "cluster" / "start-local-slurm.sh"
STOP = REPO / "cluster" / "stop-local-slurm.sh"
STATE_DIR = Path(os.environ.get("LOCAL_SLURM_STATE_DIR", Path(os.environ.get("TMPDIR", "/tmp")) / "local-slurm"))


@pytest.fixture(scope="session")
def tiny_default_run(tmp_path_factory, smollm2_model_dir) -> Path:
    """The tiny default run to its end, every job in a fresh process (no worker)."""
    work = tiny_default_workflow(tmp_path_factory.mktemp("tiny-default"), smollm2_model_dir)
    snakemake(work, "--cores", "2", "--configfile", TINY_DEFAULT, timeout=1500)
    return work


def _recorded() -> set[str]:
    started = STATE_DIR / "started"
    return {line.split()[0] for line in started.read_text().splitlines() if line.strip()} if started.exists() else set()


@pytest.fixture(scope="session")
def local_slurm():
    """A running single-node Slurm; yields its JobCompLoc (one line per finished job)."""
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (it installs packages and writes /etc/slurm)")
    if not Path("/etc/debian_version").exists() or shutil.which("apt-get") is None:
        pytest.skip("the local Slurm cluster is installed with apt on Debian/Ubuntu")
    before = _recorded()
    env = {**os.environ, "LOCAL_SLURM_STATE_DIR": str(STATE_DIR)}
    proc = subprocess.run(["bash", str(START)], env=env, capture_output=True, text=True, timeout=600)
    ours = sorted(_recorded() - before)  # only what this session started is stopped
    try:
        if proc.returncode == 2:
            pytest.skip(f"cannot start a local Slurm here: {proc.stderr.strip().splitlines()[-1]}")
        assert proc.returncode == 0, f"start-local-slurm.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
        conf = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
        jobcomp = re.search(r"^JobCompLoc\s*=\s*(\S+)", conf, re.M)
        status = re.search(r"^AccountingStorageType\s*=\s*(\S+)", conf, re.M)
        assert jobcomp and status and status.group(1) == "accounting_storage/none", (
            "expected the cluster of cluster/start-local-slurm.sh (no accounting, jobcomp/filetxt); "
            f"another Slurm is configured here:\n{conf[:2000]}"
        )
        yield Path(jobcomp.group(1))
    finally:
        if ours:
            subprocess.run(["bash", str(STOP), *ours], env=env, timeout=120, check=False)


@pytest.fixture(scope="session")
def slurm_snakemake(tmp_path_factory) -> Path:
    """The snakemake launcher of a venv = this venv + the `slurm` extra (cluster/slurm-venv.sh)."""
    base = Path(sys.executable).parents[1]
    target = tmp_path_factory.mktemp("slurm-venv") / "venv"
    proc = subprocess.run(["sh", str(REPO / "cluster" / "slurm-venv.sh"), str(base), str(target)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and re.search(r"No matching distribution|Could not find a version|network|resolve", proc.stderr):
        pytest.skip(f"cannot install the Slurm executor plugin here (no package index): {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, f"cluster/slurm-venv.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    exe = target / "bin" / "snakemake"
    assert exe.is_file()
    # The project's own venv stays free of the plugin (its import runs `scontrol show config`).
    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('snakemake_executor_plugin_slurm') is None)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "True", "the Slurm executor plugin is installed in the project venv; uninstall it there"
    return exe
