"""kill -9 of a real ``silver_labels`` job mid-way, then the README's resume commands: the
resumed silver file is byte-identical to an uninterrupted run's, and the resumed job reads
only the batches its killed predecessor had not flushed.

The teacher is a tiny random open-weight model (``source: local``) read in batches of 4
prompts (``teachers.<t>.batch_prompts``), so the job flushes many batches in a few seconds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from scorers_tiny import tiny_causal_lm
from workflow_utils import REPO, scratch_workflow, silver_only_config, snakemake

TARGET = "results/silver/tiny/synthetic_train.parquet"
LOG = "logs/silver_labels/tiny/synthetic_train.log"
CONFIG = silver_only_config(seed=5, entities=60, candidates=6, train=40, extra="""models:
  tiny: {source: local, path: "{model}"}
teachers:
  tiny: {kind: open_weight, model: tiny, T: 4, batch_prompts: 4, device: cpu}
""")


def _readme_resume_commands() -> tuple[str, str]:
    """The README's unlock and re-run lines (the block after 'After a kill or a crash')."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"\*\*After a kill or a crash\*\*.*?```bash\n(.*?)```", text, re.DOTALL).group(1)
    lines = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    unlock = next(line for line in lines if line.startswith("snakemake --unlock"))
    rerun = next(line for line in lines if line.startswith("snakemake --cores"))
    return unlock, rerun


def _workflow(tmp: Path, model: Path) -> Path:
    tmp.mkdir()
    work = scratch_workflow(tmp)
    (work / "silver.yaml").write_text(CONFIG.replace("{model}", str(model)))
    return work


def _env() -> dict[str, str]:
    exe = Path(sys.executable).with_name("snakemake")
    return {**os.environ, "PATH": f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_kill_9_during_silver_labels_then_the_readme_resume_gives_the_same_file(tmp_path):
    model = tiny_causal_lm(tmp_path / "tiny-model", seed=3)
    unlock, rerun = _readme_resume_commands()
    args = (TARGET, "--configfile", "silver.yaml")

    ref = _workflow(tmp_path / "ref", model)
    snakemake(ref, "--cores", "2", *args)
    reference = (ref / TARGET).read_bytes()
    n_batches = 40 * 4 * 2 // 4  # 40 queries x T = 4 shuffles x 2 prompts of B = 4 (6 candidates), 4 a batch

    work = _workflow(tmp_path / "work", model)
    partial = work / (TARGET + ".partial")
    cmd = f"exec {rerun} {' '.join(args)}"
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=work, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and len(list(partial.glob("b-*.arrow"))) < 3:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # Snakemake and its job, as kill -9 of the terminal's process group
    proc.wait()
    flushed = len(list(partial.glob("b-*.arrow")))
    assert not (work / TARGET).exists() and 3 <= flushed < n_batches, f"the kill did not land mid-job ({flushed})"

    for line in (unlock, f"{rerun} {' '.join(args)}"):
        res = subprocess.run(["bash", "-c", line], cwd=work, env=_env(), capture_output=True, text=True,
                             timeout=600, check=False)
        assert res.returncode == 0, f"{line}:\n{res.stderr[-4000:]}"
    assert (work / TARGET).read_bytes() == reference
    assert not partial.exists()
    resumed = re.search(r"resuming from .*?: (\d+) of (\d+) batches", (work / LOG).read_text())
    assert resumed, (work / LOG).read_text()[-2000:]
    kept, total = int(resumed.group(1)), int(resumed.group(2))
    # Every batch flushed before the kill was kept; only the rest (the one in flight included) was read.
    assert total == n_batches and kept == flushed
    print(f"silver_labels killed with {flushed} of {total} batches flushed; the resumed job kept {kept} and "
          f"read {total - kept}; the file is byte-identical to the uninterrupted run's")
