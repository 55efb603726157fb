"""Checks every reader of :mod:`presdep.data` applies to ids, grades, ranks and scores.

- An id (query or document) is at most :data:`MAX_ID_CHARS` characters and has no control
  character (NUL, tab, newline, ...: Unicode category Cc). A longer id is almost always a
  column mix-up (a passage read as an id); ids travel into TREC runs, Parquet keys and log
  lines, where a control character breaks the line. The message shows the id cut.
- A qrels grade, a run rank and a rank_llm rank fit a 32-bit signed integer (the contracts'
  Int32 columns); outside, polars used to fail with a raw TypeError naming no line.
- A qrels grade is at most :data:`MAX_GRADE`: trec_eval (inside pytrec_eval) keeps a counter
  per relevance level from 0 to a query's highest grade, about 8 bytes per unit of grade, so a
  grade of 2**31 - 1 ran the metrics job out of memory (16 GB). Negative grades cost nothing.
- A first-stage score is finite: ``inf``, ``-inf``, ``nan`` and ``1e400`` (which overflows
  to inf) are refused; an order by such scores is undefined.
"""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path

from presdep.contracts.errors import InputFormatError, cut

MAX_ID_CHARS = 512
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Published collections grade 0..4 at most; 65,535 leaves room for any hand-made scale and keeps
# trec_eval's per-level counters under 0.5 MB.
MAX_GRADE = 2**16 - 1


def check_id(path: str | Path, where: str, value: str, what: str) -> str:
    """``value`` if it is a usable ``what`` id (see the module docstring), else an InputFormatError."""
    if len(value) > MAX_ID_CHARS:
        raise InputFormatError(path, where, f"{what} {cut(value)} is longer than {MAX_ID_CHARS} characters; "
                               "is a text column read as the id?")
    bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise InputFormatError(path, where, f"{what} {cut(value)} contains the control character {bad!r}; "
                               "ids must be printable text")
    return value


def check_int32(path: str | Path, where: str, value: int, what: str) -> int:
    """``value`` if it fits the contracts' Int32 columns, else an InputFormatError."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise InputFormatError(path, where, f"{what} {cut(value)} is outside the 32-bit integer range "
                               f"[{INT32_MIN}, {INT32_MAX}]")
    return value


def grade_error(grade: int) -> str | None:
    """Why ``grade`` cannot be a qrels grade, or None when it can."""
    if grade > MAX_GRADE:
        return (f"grade {grade} is above the maximum {MAX_GRADE} (the metrics' memory grows with the highest "
                "grade: trec_eval keeps a counter per grade level); give the collection's own scale, e.g. 0..3")
    if grade < INT32_MIN:
        return f"grade {grade} is below the 32-bit integer range [{INT32_MIN}, {INT32_MAX}]"
    return None


def check_grade(path: str | Path, where: str, value: int) -> int:
    """``value`` if it is a usable qrels grade (see the module docstring), else an InputFormatError."""
    reason = grade_error(value)
    if reason is not None:
        raise InputFormatError(path, where, reason)
    return value


def check_finite(path: str | Path, where: str, value: float, what: str, written: object = None) -> float:
    """``value`` if finite, else an InputFormatError showing the value as written (``written``)."""
    if not math.isfinite(value):
        shown = cut(written if written is not None else value)
        raise InputFormatError(path, where, f"{what} {shown} is not a finite number (inf, -inf, nan or an "
                               "overflow such as 1e400); give finite scores")
    return value
