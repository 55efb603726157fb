"""Atomic file and folder writes: a killed job leaves the old file or the new one, never a torn one.

Every artifact presdep writes goes through here (the Parquet contracts of
:mod:`presdep.contracts.schemas`, JSON, text, figures, model folders): the content is written
to a temporary sibling, then renamed into place with ``os.replace``. The temporary file gets
the mode an ordinary ``open()`` would (0666 less the umask), and a full filesystem raises
:class:`~presdep.contracts.errors.DiskFullError` naming the target.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# The process umask, read once at import (reading it means setting it, which is not thread-safe).
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_path(path: Path):
    """A temporary sibling of ``path``; the caller renames it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates mode 0600; results are shared files, so give them the mode an
    # ordinary open() would (0666 less the umask), which the rename keeps.
    os.fchmod(fd, 0o666 & ~_UMASK)
    os.close(fd)
    return Path(tmp)


def atomic_write(path: str | os.PathLike, writer) -> Path:
    """Call ``writer(tmp_path)`` on a temporary sibling, then rename it onto ``path``.

    A crash at any point leaves either the old file or the new one, never a torn one. A full
    filesystem (ENOSPC, EDQUOT, or a writer's own words for it, see
    :meth:`~presdep.contracts.errors.DiskFullError.from_failure`) raises
    :class:`~presdep.contracts.errors.DiskFullError` naming ``path`` and the space left; the
    temporary file is removed either way.
    """
    path = Path(path)
    tmp = None
    try:
        tmp = atomic_path(path)
        writer(tmp)
        os.replace(tmp, path)
    except Exception as exc:
        from presdep.contracts.errors import DiskFullError

        full = DiskFullError.from_failure(path, exc)  # before the partial file goes: it holds the space
        if full is None or full is exc:
            raise
        raise full from exc
    finally:
        if tmp is not None and tmp.exists():
            tmp.unlink()
    return path


def write_dir_atomic(final: str | os.PathLike, write) -> Path:
    """Fill a temporary sibling folder with ``write(tmp)``, then rename it onto ``final``.

    For writers that produce folders (``save_pretrained``, a hub snapshot, a checkpoint). A
    crash leaves the old folder or the new one; an old one is replaced only once the new
    one is complete. Files get the mode an ordinary open() would give (writers such as
    safetensors create them through mkstemp, 0600). A full filesystem raises
    :class:`~presdep.contracts.errors.DiskFullError` naming ``final``, as in
    :func:`atomic_write`; the temporary folder is removed either way.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        tmp.chmod(0o777 & ~_UMASK)
        write(tmp)
        for path in tmp.rglob("*"):
            if path.is_file() and not path.is_symlink():
                path.chmod(0o666 & ~_UMASK)
            elif path.is_dir():
                path.chmod(0o777 & ~_UMASK)
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
            os.replace(final, old / "x")
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except Exception as exc:
        from presdep.contracts.errors import DiskFullError

        full = DiskFullError.from_failure(final, exc)
        if full is None or full is exc:
            raise
        raise full from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write a text file atomically (tables, reports, yaml)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


__all__ = ["atomic_path", "atomic_write", "write_bytes_atomic", "write_dir_atomic", "write_text_atomic"]
