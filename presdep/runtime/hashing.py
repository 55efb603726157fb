"""sha256 of files and model directories: the one place that reads files to hash them."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterable


def update_from_file(h: Any, path: str | os.PathLike) -> None:
    """Feed a file's bytes into a hash object, 1 MiB at a time (model weights are large)."""
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    update_from_file(h, path)
    return h.hexdigest()


def files_sha256(paths: Iterable[str | os.PathLike]) -> str:
    """One sha256 over several files' names and bytes (sorted by name)."""
    h = hashlib.sha256()
    for p in sorted(Path(x) for x in paths):
        h.update(p.name.encode("utf-8") + b"\x00")
        update_from_file(h, p)
    return h.hexdigest()


def weights_sha256(model_dir: str | os.PathLike) -> str:
    """Hash of a model or adapter directory's weights and configs (what its outputs depend on)."""
    d = Path(model_dir)
    files = [p for p in d.iterdir() if p.is_file() and (p.suffix in (".safetensors", ".bin", ".json", ".gguf"))]
    if not files:
        raise FileNotFoundError(f"no weight or config files in {d} to identify the model by")
    return files_sha256(files)


__all__ = ["files_sha256", "sha256_file", "update_from_file", "weights_sha256"]
