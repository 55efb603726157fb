"""The project's errors: every one derives from :class:`PresdepError`.

Callers that report problems to a person (the CLI, the workflow's scripts) catch the
base class; each subclass also keeps the built-in base it always had (ValueError,
RuntimeError, ...), so code that caught those still works.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path


class PresdepError(Exception):
    """Base of every error presdep raises on purpose (bad input, bad config, a failed stage)."""


class ConfigError(PresdepError, ValueError):
    """The config does not match its schema; the message lists every problem by YAML path."""


class SchemaError(PresdepError, ValueError):
    """A table does not match its Parquet contract."""


class InputFormatError(PresdepError, ValueError):
    """A user-supplied file does not have the expected format."""

    def __init__(self, path: str | Path, where: str, problem: str):
        self.path = str(path)
        self.where = where
        super().__init__(f"{path}, {where}: {problem}")


CUT_CHARS = 80
"""How much of a rejected value an error message shows."""


def cut(value: object, limit: int = CUT_CHARS) -> str:
    """``repr(value)`` for a one-line message: whole when short, else its first ``limit``
    characters and the value's size, e.g. ``'aaaa...'... (1,500,000 characters)``.

    A rejected id, line or request field may be megabytes long; echoing it whole would bury
    the message (and a 5 MB id in a log line is a problem of its own).
    """
    if isinstance(value, str):
        if len(value) <= limit:
            text = repr(value)
            if len(text) <= limit:
                return text
        # repr of a prefix only: never build the repr of a huge value.
        return f"{repr(value[:limit])[:limit]}... ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class InvalidInput(PresdepError, ValueError):
    """An argument or input value outside what the function accepts; the message says what was expected."""


class StabilityError(PresdepError, ValueError):
    """Input to the stability analysis is unusable; the message says which and why."""


class ReportError(PresdepError, ValueError):
    """A run report is malformed; the message names the file and the offending entry."""


# errno values that mean "the filesystem has no room for this write".
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# What writers that drop the errno (polars, pyarrow, torch's C++ streams) still say.
_DISK_FULL_TEXT = {"no space left on device": errno.ENOSPC, "os error 28": errno.ENOSPC,
                   "disk quota exceeded": errno.EDQUOT, "os error 122": errno.EDQUOT}


def _size(n: int) -> str:
    step = 1024.0
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < step or unit == "TiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= step
    return f"{n} bytes"  # pragma: no cover


def free_bytes(path: str | Path) -> int | None:
    """Free space (for this user) on the filesystem holding ``path`` or its nearest existing parent."""
    p = Path(path).absolute()
    for candidate in (p, *p.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


class DiskFullError(PresdepError, OSError):
    """A write failed because its filesystem is full (ENOSPC) or the user's quota is spent (EDQUOT).

    The message names the file, the space left on that filesystem and the fix (free space and
    re-run). ``errno`` is ENOSPC or EDQUOT, ``path`` the file, ``free_bytes`` the space left.
    """

    def __init__(self, message: str, *, path: str | Path | None = None, code: int = errno.ENOSPC,
                 free: int | None = None):
        super().__init__(message)
        self.errno = code
        self.path = None if path is None else str(path)
        self.free_bytes = free

    @classmethod
    def for_path(cls, path: str | Path, code: int = errno.ENOSPC, detail: str = "") -> DiskFullError:
        free = free_bytes(Path(path).parent)
        left = "unknown space" if free is None else _size(free)
        if code == errno.EDQUOT:
            what, fix = "disk quota exceeded (EDQUOT)", "free space (or raise the quota) and re-run"
        else:
            what, fix = "no space left on device (ENOSPC)", "free space there and re-run"
        detail = " ".join(detail.split())
        if len(detail) > 200:
            detail = detail[:200] + "..."
        said = f" [{detail}]" if detail else ""
        return cls(f"{path}: could not be written: {what}; {left} free on that filesystem; {fix}{said}",
                   path=path, code=code, free=free)

    @classmethod
    def from_failure(cls, path: str | Path, exc: BaseException) -> DiskFullError | None:
        """The DiskFullError that ``exc`` (raised while writing ``path``) amounts to, or None.

        A disk-full failure is an OSError with errno ENOSPC/EDQUOT anywhere in the exception's
        chain, an error whose text says so (polars, pyarrow), or an OSError/RuntimeError raised
        while the filesystem has no byte left (torch.save's ``basic_ios::clear: iostream error``
        or ``unexpected pos``, which say nothing about space). ``exc`` itself if it already is one.
        """
        if isinstance(exc, DiskFullError):
            return exc
        chain, seen = [], set()
        e: BaseException | None = exc
        while e is not None and id(e) not in seen and len(chain) < 10:
            seen.add(id(e))
            chain.append(e)
            e = e.__cause__ or e.__context__
        detail = f"{type(exc).__name__}: {exc}"
        for e in chain:
            if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
                return cls.for_path(path, e.errno, detail)
        for e in chain:
            text = str(e).lower()
            for marker, code in _DISK_FULL_TEXT.items():
                if marker in text:
                    return cls.for_path(path, code, detail)
        if isinstance(exc, (OSError, RuntimeError)) and free_bytes(Path(path).parent) == 0:
            return cls.for_path(path, errno.ENOSPC, detail)
        return None
