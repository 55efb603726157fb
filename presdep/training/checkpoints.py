"""Checkpoints of a student's training run: writing, finding and restoring them.

A checkpoint ``checkpoints/step000010/`` holds the adapter at that step, the train-log
rows up to it (``log.json``) and, in the newest checkpoint only, the trainer state
(``trainer.pt``: optimizer, RNG states, step). A checkpoint is resumed only by a run
with the same fingerprint (settings, seed, data, version); see presdep.runtime.resume.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import torch

from presdep import __version__
from presdep.contracts.schemas import atomic_write, write_dir_atomic
from presdep.training.lora import adapter_state, load_adapter_state, save_adapter


def step_dir(out_dir: Path, step: int) -> Path:
    """The checkpoint folder of ``step`` under a run's ``out_dir``."""
    return out_dir / "checkpoints" / f"step{step:06d}"


def _save_state(state: dict, path: Path) -> None:
    """torch.save through a buffer: a file path would name the archive's inner folder after the
    atomic writer's random temporary name, so equal states would give different bytes."""
    buf = io.BytesIO()
    torch.save(state, buf)
    path.write_bytes(buf.getvalue())


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint (one with trainer state), or None."""
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(p for p in root.glob("step*") if p.is_dir() and (p / "trainer.pt").exists())
    return done[-1] if done else None


def write_checkpoint(out_dir: Path, step: int, model: Any, optimizer: torch.optim.Optimizer,
                     rows: list[dict], heldout_rows: list[dict]) -> Path:
    """The checkpoint of ``step``; older checkpoints keep their adapters but lose their trainer state."""

    def write(tmp: Path) -> None:
        save_adapter(model, tmp / "adapter")
        state = {
            "step": step,
            "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "adapter": adapter_state(model),
        }
        # Through the atomic writer: on a full disk torch.save says only "basic_ios::clear:
        # iostream error" (or "unexpected pos"); atomic_write turns that into DiskFullError.
        atomic_write(tmp / "trainer.pt", lambda p: _save_state(state, p))
        (tmp / "log.json").write_text(json.dumps({"rows": rows, "heldout": heldout_rows}))

    final = step_dir(out_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    write_dir_atomic(final, write)
    # Only the newest checkpoint keeps optimizer state; older adapters stay for selection.
    for old in (out_dir / "checkpoints").glob("step*"):
        if old != final and (old / "trainer.pt").exists():
            (old / "trainer.pt").unlink()
    return final


def restore_checkpoint(ckpt: Path, model: Any, optimizer: torch.optim.Optimizer) -> tuple[list[dict], list[dict], int]:
    """Load a checkpoint's adapter, optimizer and RNG states; returns (log rows, held-out rows, step)."""
    state = torch.load(ckpt / "trainer.pt", map_location="cpu", weights_only=False)
    load_adapter_state(model, state["adapter"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    saved = json.loads((ckpt / "log.json").read_text())
    return saved["rows"], saved["heldout"], int(state["step"])


def frame_sha(df: pl.DataFrame | None) -> str | None:
    """A content hash of a table, independent of its row and column order (None for None)."""
    if df is None:
        return None
    h = hashlib.sha256()
    for name in sorted(df.columns):
        h.update(name.encode() + b"\x00")
        for v in df.sort(sorted(df.columns))[name].to_list():
            h.update(repr(v).encode() + b"\x1f")
    return h.hexdigest()


def run_fingerprint(s: dict, B: int, seed: int, max_doc_chars: int | None, *frames: pl.DataFrame | None) -> str:
    """What a checkpoint must share with this run to be resumed (settings, seed, data)."""
    ident = {"presdep_version": __version__, "student": s, "B": B, "seed": seed, "max_doc_chars": max_doc_chars,
             "data": [frame_sha(f) for f in frames]}
    return json.dumps(ident, sort_keys=True, default=str)


__all__ = ["frame_sha", "latest_checkpoint", "restore_checkpoint", "run_fingerprint", "step_dir",
           "write_checkpoint"]
