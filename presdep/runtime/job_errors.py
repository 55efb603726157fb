"""A workflow job's input error as one line: the config key, the file, the line and the fix.

A bad input file (a TREC run given as rank_llm JSON, topics given as qrels, a missing corpus)
is the user's to fix, not a bug: a traceback after Snakemake's banner hides the one line
that matters. :func:`install` (called by every script adapter through
:func:`presdep.runtime.logs.log_to_file`) replaces the job's exception hook: an error presdep
raises on purpose (:class:`~presdep.contracts.errors.PresdepError`) or a missing, unreadable
or wrong-kind file becomes one line on the console and in the log, prefixed with the config
key that names the file when the job knows it. Any other exception is a bug and keeps its
traceback. ``PRESDEP_TRACEBACK=1`` adds the traceback to the log for input errors too.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Mapping
from typing import TextIO

from presdep.contracts.errors import PresdepError

# What a person fixes in their files or config (not a bug in presdep).
INPUT_ERRORS = (PresdepError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
MESSAGE_LIMIT = 1000  # the one line stays a line: a reader's message that echoes a whole value is cut


def _norm(path: object) -> str:
    return os.path.normpath(os.path.abspath(str(path)))


def key_for(path: object, keys: Mapping[str, str]) -> str | None:
    """The config key of ``path``: the key naming that file, or the folder that holds it."""
    if not path or not keys:
        return None
    target = _norm(path)
    best: tuple[int, str] | None = None
    for named, key in keys.items():
        base = _norm(named)
        if target == base or target.startswith(base.rstrip(os.sep) + os.sep):
            if best is None or len(base) > best[0]:
                best = (len(base), key)
    return None if best is None else best[1]


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else f"{text[:MESSAGE_LIMIT]}... ({len(text):,} characters)"


def describe(exc: BaseException, keys: Mapping[str, str] | None = None) -> str | None:
    """The one line for an input error (None for anything else: a bug keeps its traceback)."""
    if not isinstance(exc, INPUT_ERRORS):
        return None
    path = getattr(exc, "path", None) or getattr(exc, "filename", None)
    if isinstance(exc, OSError) and not isinstance(exc, PresdepError) and exc.filename:
        message = f"{exc.filename}: {exc.strerror or type(exc).__name__}"
    else:
        message = str(exc) or type(exc).__name__
    key = key_for(path, keys or {})
    return _cut(f"{key}: {message}" if key else message)


def install(console: TextIO, keys: Mapping[str, str] | None = None) -> None:
    """Report input errors of this process as one line on ``console`` and on stderr (the log)."""
    keys = dict(keys or {})

    def hook(kind, exc, tb):
        line = describe(exc, keys)
        if line is None:
            sys.__excepthook__(kind, exc, tb)
            return
        text = f"presdep: input error: {line}\n"
        if os.environ.get("PRESDEP_TRACEBACK"):
            sys.stderr.write("".join(traceback.format_exception(kind, exc, tb)))
        sys.stderr.write(text)
        sys.stderr.flush()
        if console is not sys.stderr:
            console.write(text)
            console.flush()

    sys.excepthook = hook
