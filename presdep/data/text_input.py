"""Reading user text files line by line (JSONL, JSON lists), errors naming the file and the line or entry.

Every text reader of :mod:`presdep.data` (TREC topics, qrels and runs, BEIR corpus, queries
and qrels, rank_llm JSON, the QA and response formats) reads through :func:`text_lines`, so
the rules here hold for all of them:

- UTF-8 only; a bad byte is an error naming the file and the line.
- A leading UTF-8 byte-order mark is dropped and said once in the log; a UTF-16 mark is
  an error (:mod:`presdep.runtime.text_files`, shared with every other reader of user text).
- A folder where a file is read is an error (saying so when it is a BEIR folder), and a line
  or document that is not JSON says what it looks like instead (:mod:`presdep.data.sniff`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from presdep.contracts.errors import InputFormatError
from presdep.data import sniff
from presdep.runtime.text_files import strip_bom


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
    if path.is_dir():
        raise InputFormatError(path, "path", f"is a folder, expected a file{sniff.folder_hint(path)}")
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
            raise InputFormatError(path, f"line {number}", f"invalid JSON ({exc.msg} at column {exc.colno})"
                                   f"{sniff.hint(line, sniff.JSONL, path)}") from None
        if not isinstance(obj, dict):
            raise InputFormatError(path, f"line {number}", f"expected a JSON object, got {type(obj).__name__}"
                                   f"{sniff.hint(line, sniff.JSONL, path)}")
        yield number, obj


def json_list(path: str | Path, expected: str) -> list[Any]:
    """A whole-file JSON document that must be a list (``expected`` says of what, for the error)."""
    try:
        entries = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputFormatError(path, f"line {exc.lineno} column {exc.colno}",
                               f"invalid JSON: {exc.msg}{sniff.file_hint(path, (sniff.JSON, sniff.JSONL))}") from None
    if not isinstance(entries, list):
        raise InputFormatError(path, "top level",
                               f"expected a JSON list of {expected}{sniff.file_hint(path, (sniff.JSON, sniff.JSONL))}")
    return entries
