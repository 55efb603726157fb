"""Reading user text files line by line (JSONL, JSON lists), errors naming the file and the line or entry.

Every text reader of :mod:`presdep.data` (TREC topics, qrels and runs, BEIR corpus, queries
and qrels, rank_llm JSON, the QA and response formats) reads through :func:`text_lines`, so
the rules here hold for all of them:

- UTF-8 only; a bad byte is an error naming the file and the line.
- A leading UTF-8 byte-order mark (what Windows editors and Excel write) is dropped, as
  encoding ``utf-8-sig`` would, and said once in the log
  (``<file>: starts with a UTF-8 byte-order mark; ignored``). Kept, it would glue itself
  to the first field: the first query id would read ``"\ufeff19335"`` and its judgements
  would silently miss their query.
- A UTF-16 byte-order mark is an error (the file is not UTF-8 at all).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from presdep.contracts.errors import InputFormatError

log = logging.getLogger(__name__)

UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
# (file, mtime, size) already reported as starting with a BOM: one log line per file, not per read.
_bom_reported: set[tuple[str, int, int]] = set()


def strip_bom(data: bytes, where: str | Path) -> bytes:
    """``data`` (a file's first line, or all of it) without a leading UTF-8 byte-order mark.

    The mark is logged once per file (``where``); a UTF-16 mark is an InputFormatError.
    """
    if data.startswith(UTF8_BOM):
        _report_bom(where)
        return data[len(UTF8_BOM):]
    if data.startswith(_UTF16_BOMS):
        raise InputFormatError(where, "line 1", "UTF-8 text, not a UTF-16 byte-order mark (save the file as UTF-8)")
    return data


def _report_bom(where: str | Path) -> None:
    key: tuple[str, int, int] = (str(where), 0, 0)
    try:
        st = Path(where).stat()
        key = (str(Path(where).resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        pass
    if key not in _bom_reported:
        _bom_reported.add(key)
        log.warning("%s: starts with a UTF-8 byte-order mark; ignored", where)


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, line without newline), decoding strictly as UTF-8.

    Decoding line by line lets a non-UTF-8 byte be reported with its line number
    instead of a bare UnicodeDecodeError from deep inside a reader. A leading UTF-8
    byte-order mark is dropped (and logged), see the module docstring.
    """
    path = Path(path)
    opener = _open_binary(path)
    with opener as fh:
        for number, raw in enumerate(fh, start=1):
            if number == 1:
                raw = strip_bom(raw, path)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputFormatError(
                    path, f"line {number}", f"not valid UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})"
                ) from None
            yield number, line.rstrip("\r\n")


def _open_binary(path: Path):
    if not path.exists():
        raise FileNotFoundError(f"input file not found: {path}")
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rb")
    return open(path, "rb")


def read_text(path: str | Path) -> str:
    """Whole file as UTF-8 text; a bad byte is reported with its line number."""
    return "\n".join(line for _, line in text_lines(path))


def json_records(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSONL file; anything but a JSON object is an error."""
    for number, line in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputFormatError(path, f"line {number}", f"invalid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise InputFormatError(path, f"line {number}", f"expected a JSON object, got {type(obj).__name__}")
        yield number, obj


def json_list(path: str | Path, expected: str) -> list[Any]:
    """A whole-file JSON document that must be a list (``expected`` says of what, for the error)."""
    try:
        entries = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputFormatError(path, f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}") from None
    if not isinstance(entries, list):
        raise InputFormatError(path, "top level", f"expected a JSON list of {expected}")
    return entries
