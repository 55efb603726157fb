"""Shared by the worker's tests (tests/unit/runtime/test_worker*.py): the environment a
worker and its jobs run with, a worker that imports nothing heavy, and a job script."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from presdep.runtime.worker.client import WorkerClient

# The worker's environment and every job's (pytest changes PYTEST_CURRENT_TEST from test to test).
ENV = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def light_worker(**kw) -> WorkerClient:
    """A ready worker without the preloaded imports: what its tests check does not depend on them."""
    client = WorkerClient(env=ENV, preload=(), **kw)
    client.wait_ready()
    return client


def job_script(tmp_path: Path, body: str, name: str = "job.py") -> str:
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    return str(script)
