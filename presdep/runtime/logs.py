"""Logging set-up for Snakemake script adapters.

Everything a job writes to stderr (logging, warnings, tracebacks, tqdm bars) goes to
the rule's log file. Progress bars are turned into whole lines, at most one every
``every`` seconds (plus the bar's final state), so the log holds readable lines instead
of one long carriage-return line. Once a job has run for ``every`` seconds, the same
lines are copied to the console (the job's original stderr, which Snakemake shows), so
a long job says which item of how many it is on, its rate and the time left; every
warning goes to the console too.
"""

from __future__ import annotations

import io
import logging
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from presdep.runtime.job_errors import install as install_error_hook

PROGRESS_EVERY_S = 30.0  # console and log: one progress line per bar at most this often
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_SPLIT = re.compile(r"(\r|\n)")


class ProgressStream(io.TextIOBase):
    """A text stream for the log file that throttles carriage-return progress updates.

    Plain text passes through to ``log`` unchanged. A segment that starts with a
    carriage return (how tqdm redraws its bar) is a progress update: the latest one is
    written as a line to ``log`` and, prefixed with ``label``, to ``console`` when
    ``every`` seconds have passed since the last progress line, and always when the bar
    ends (a newline after it).
    """

    def __init__(self, log: TextIO, console: TextIO | None, label: str, every: float = PROGRESS_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self._log, self._console, self._label = log, console, label
        self._every, self._clock = every, clock
        self._in_status = False  # between a '\r' and the next '\r' or '\n'
        self._status = ""  # text of the progress update being received
        self._last_emit: float | None = None
        self._last_line = ""
        self._pending = ""  # the latest update not yet written
        self._started: float | None = None  # first progress update of this job
        self._shown = False  # whether the console has had a progress line yet

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return getattr(self._log, "encoding", None) or "utf-8"

    def fileno(self) -> int:  # child processes given sys.stderr write straight into the log
        return self._log.fileno()

    def write(self, s: str) -> int:
        if self._in_status and s and s[0] not in "\r\n":
            # tqdm writes each redraw as one '\r...' call: anything else (a log record
            # written mid-bar) is plain text, not the end of the bar's line
            self._end_status(final=False)
            self._in_status = False
        for piece in _SPLIT.split(s):
            if piece == "\r":
                self._end_status(final=False)
                self._in_status = True
            elif piece == "\n":
                if self._in_status:
                    self._end_status(final=True)
                    self._in_status = False
                else:
                    self._log.write("\n")
            elif piece:
                if self._in_status:
                    self._status += piece
                else:
                    self._log.write(piece)
        return len(s)

    def _end_status(self, final: bool) -> None:
        line, self._status = self._status.strip(), ""
        if not line:
            return  # tqdm clears a bar with blanks before redrawing or closing it
        now = self._clock()
        if self._started is None:
            self._started = now
        due = self._last_emit is None or now - self._last_emit >= self._every
        if (due or final) and line != self._last_line:
            self._emit(line, now)
        elif line != self._last_line:
            self._pending = line

    def _emit(self, line: str, now: float) -> None:
        self._pending = ""
        self._last_emit, self._last_line = now, line
        self._log.write(line + "\n")
        # The console hears only from jobs that have run for `every` seconds (and then also
        # their final state): a job of a few seconds stays quiet there.
        if self._console is not None and (self._shown or now - self._started >= self._every):
            self._shown = True
            self._console.write(f"[{self._label}] {line}\n")
            self._console.flush()

    def flush(self) -> None:
        self._log.flush()
        if self._console is not None:
            self._console.flush()

    def close(self) -> None:
        if self._in_status:
            self._end_status(final=True)
            self._in_status = False
        if self._pending:  # a bar cleared on close (leave=False) still leaves its last state
            self._emit(self._pending, self._clock())
        self.flush()
        super().close()


def _label(path: Path) -> str:
    """logs/score/v/d.log -> score/v/d (the rule and wildcards, short enough for a console line)."""
    parts = path.with_suffix("").parts
    if "logs" in parts[:-1]:
        parts = parts[len(parts) - parts[::-1].index("logs"):]
    return "/".join(parts[-4:])


def log_to_file(path: str | Path | None, every: float = PROGRESS_EVERY_S,
                input_keys: Mapping[str, str] | None = None) -> None:
    """Send stderr and logging to the rule's log; progress lines and warnings also to the console.

    An input error ends the job as one line naming the config key of the file (``input_keys``:
    {path: config key}), see :mod:`presdep.runtime.job_errors`.
    """
    console = sys.stderr
    install_error_hook(console, input_keys)
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        log = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the job
        sys.stderr = ProgressStream(log, console, _label(path), every)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=_FORMAT, force=True)
    if path:
        # Warnings (a degenerate threshold, skipped queries) reach the terminal as well as the log.
        loud = logging.StreamHandler(console)
        loud.setLevel(logging.WARNING)
        loud.setFormatter(logging.Formatter(f"[{_label(path)}] %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(loud)
