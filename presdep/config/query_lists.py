"""Fixed query lists: bare query ids, each list pinned by its sha256.

The paper runs the random shuffles of 15 reranking collections (tau-PSI, the Jaccard
split and cells, BSC) on a fixed list of query ids published with its code, and takes
Nectar's deduplicated prompts from another such list (docs/methods/presentations.md).
Those lists ship in ``presdep/config/query_lists/<name>.txt``; ``catalogue.yaml``'s
``query_lists`` section gives each one's sha256 and where it was published. A config may
name its own file instead (``{path: ..., sha256: ...}``).

A list file holds one query id per line; a final newline is optional. Blank lines,
surrounding whitespace and repeated ids are refused with the file and line, because each
would silently change which queries are measured.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from presdep.contracts.errors import InputFormatError, InvalidInput

LISTS_DIR = Path(__file__).with_name("query_lists")


@dataclass(frozen=True)
class QueryList:
    """One pinned list: a shipped one by ``name`` (``path`` None) or a file of the user's."""

    name: str
    sha256: str | None = None  # None only for a user file not pinned in the config (recorded when read)
    path: str | None = None

    @property
    def file(self) -> Path:
        return Path(self.path) if self.path is not None else LISTS_DIR / f"{self.name}.txt"

    def ids(self) -> tuple[str, ...]:
        """The ids in file order, after checking the file against its sha256."""
        f = self.file
        try:
            data = f.read_bytes()
        except FileNotFoundError:
            raise InvalidInput(f"query list {self.name!r}: file {f} not found") from None
        got = hashlib.sha256(data).hexdigest()
        if self.sha256 is not None and got != self.sha256:
            raise InputFormatError(f, "whole file", f"sha256 {self.sha256} (the pinned list), got {got}")
        return parse_ids(data, f)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "path": self.path}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> QueryList | None:
        if d is None:
            return None
        return cls(name=d["name"], sha256=d.get("sha256"), path=d.get("path"))

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, *, where: str) -> QueryList | None:
        """From a dataset's ``{list: <name>, sha256}`` or ``{path: <file>, sha256?}`` (schema-checked)."""
        if spec is None:
            return None
        if ("list" in spec) == ("path" in spec):
            raise InvalidInput(f"{where}: give exactly one of 'list' (a shipped list) and 'path' (your own file)")
        if "list" in spec:
            if not spec.get("sha256"):
                raise InvalidInput(f"{where}: list {spec['list']!r} needs its sha256 (the catalogue gives it)")
            return cls(name=str(spec["list"]), sha256=spec["sha256"])
        return cls(name=Path(spec["path"]).stem, sha256=spec.get("sha256"), path=str(spec["path"]))


def parse_ids(data: bytes, where: str | Path) -> tuple[str, ...]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(where, f"byte {exc.start}", "UTF-8 text") from None
    if text.startswith("\ufeff"):
        raise InputFormatError(where, "line 1", "a query id, not a UTF-8 byte-order mark")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    seen: dict[str, int] = {}
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            raise InputFormatError(where, f"line {i}", "one query id per line (blank line)")
        if line != line.strip():
            raise InputFormatError(where, f"line {i}", f"a bare query id, got {line!r} (surrounding whitespace)")
        if line in seen:
            raise InputFormatError(where, f"line {i}", f"distinct query ids; {line!r} is also on line {seen[line]}")
        seen[line] = i
    if not seen:
        raise InputFormatError(where, "whole file", "at least one query id")
    return tuple(seen)
