"""Logging set-up for Snakemake script adapters: everything goes to the rule's log file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def log_to_file(path: str | Path | None) -> None:
    """Send stderr (tqdm progress, warnings, tracebacks) and logging to the rule's log."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        sys.stderr = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the job
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
