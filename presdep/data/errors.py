"""One error type for bad input files, always naming the file and the line or entry."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator


class InputFormatError(ValueError):
    """A user-supplied file does not have the expected format."""

    def __init__(self, path: str | Path, where: str, problem: str):
        self.path = str(path)
        self.where = where
        super().__init__(f"{path}, {where}: {problem}")


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, line without newline), decoding strictly as UTF-8.

    Decoding line by line lets a non-UTF-8 byte be reported with its line number
    instead of a bare UnicodeDecodeError from deep inside a reader.
    """
    path = Path(path)
    opener = _open_binary(path)
    with opener as fh:
        for number, raw in enumerate(fh, start=1):
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
