"""Sidecar folders that let a killed job resume where it stopped.

A job writes finished pieces of work into a folder next to its output, together
with a fingerprint of everything the pieces depend on (inputs, settings,
version). A re-run with the same fingerprint reuses the pieces; a folder left by
a run with other inputs is discarded, so stale work never leaks into a result.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from presdep.contracts.schemas import write_text_atomic

log = logging.getLogger(__name__)

FINGERPRINT_FILE = "fingerprint.json"


def resume_dir(path: str | os.PathLike, fingerprint: str,
               explain: Callable[[str], str | None] | None = None) -> Path:
    """``path`` as a folder holding only work of the run identified by ``fingerprint``.

    ``explain(old fingerprint)`` may name what differs (e.g. "another teacher (...)") for the
    warning that a folder was discarded; None keeps the general words."""
    path = Path(path)
    fp_file = path / FINGERPRINT_FILE
    old = fp_file.read_text(errors="replace") if fp_file.exists() else None
    if path.exists() and old != fingerprint:
        why = explain(old) if explain is not None and old is not None else None
        log.warning("%s: discarding work of a run with %s", path, why or "other inputs or settings")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    if not fp_file.exists():
        write_text_atomic(fp_file, fingerprint)
    return path


def partial_dir(out_path: str | os.PathLike) -> Path:
    """The sidecar folder of an output file: ``<out>.partial/``."""
    out_path = Path(out_path)
    return out_path.parent / (out_path.name + ".partial")


__all__ = ["FINGERPRINT_FILE", "partial_dir", "resume_dir"]
