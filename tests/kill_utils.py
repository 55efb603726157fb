"""Kill a job with SIGKILL once it has flushed some of its work, then resume it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def kill_then_resume(slow: list[str], resume: list[str], out: Path, pattern: str, at_least: int, total: int,
                     timeout: float = 120) -> tuple[int, str]:
    """Start ``slow``; SIGKILL it once ``<out>.partial/`` holds ``at_least`` files matching
    ``pattern``; check nothing final was written; run ``resume`` to the end.

    Returns (pieces flushed before the kill, stdout of the resumed run).
    """
    partial = out.parent / (out.name + ".partial")
    proc = subprocess.Popen(slow, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline and len(list(partial.glob(pattern))) < at_least:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_done = len(list(partial.glob(pattern)))
    assert at_least <= n_done < total, f"kill came too late or too early: {n_done} of {total} flushed"
    assert not out.exists(), "a killed job wrote its final output"
    res = subprocess.run(resume, check=True, capture_output=True, text=True)
    assert not partial.exists(), "the sidecar folder outlived the finished job"
    return n_done, res.stdout
