"""Reading a user's text file: UTF-8 only, a leading byte-order mark dropped and said.

A UTF-8 byte-order mark (what Windows editors and Excel write) would otherwise glue itself
to the first field: a qrels file's first query id reads ``"\\ufeff19335"``, a JSON report
fails to parse, a prompt template starts with an invisible character. Every reader of user
text (the data formats in :mod:`presdep.data.text_input`, YAML configs, prompt templates,
run reports, benchmark splits) drops it, as encoding ``utf-8-sig`` would, and logs once per
file ``<file>: starts with a UTF-8 byte-order mark; ignored``. A UTF-16 mark is an error:
the file is not UTF-8 at all.
"""

from __future__ import annotations

import logging
from pathlib import Path

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


def decode_utf8(data: bytes, where: str | Path) -> str:
    """Bytes of a whole file as text, BOM dropped; a bad byte is an error naming its line."""
    data = strip_bom(data, where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFormatError(where, f"line {line}",
                               f"not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None


def read_text_file(path: str | Path) -> str:
    """A whole user text file, read as :func:`decode_utf8` says."""
    return decode_utf8(Path(path).read_bytes(), path)
