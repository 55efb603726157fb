"""Duplicate texts inside one candidate set (a prompt's responses, a question's paragraphs).

Two identical texts in one set get the same score from any scorer that reads only the text,
so a judged difference between them can never be recovered (and a chosen/rejected pair of
one text is a coin flip). They are kept as given, counted, and named once per file: the
number of sets that have any, the number of texts that repeat an earlier one, and the first
such set's id. The count is also recorded where the set is written (a fetch's manifest).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from presdep.contracts.errors import cut

log = logging.getLogger(__name__)


@dataclass
class DuplicateTexts:
    """Counts of repeated texts over the sets of one file; ``what`` names a text ("response", ...)."""

    what: str
    sets: int = 0
    duplicates: int = 0
    first: str | None = None

    def add(self, set_id: str, texts: Sequence[str]) -> int:
        """Count one set's texts; the number of texts that repeat an earlier one of the set."""
        extra = len(texts) - len(set(texts))
        if extra:
            self.sets += 1
            self.duplicates += extra
            if self.first is None:
                self.first = str(set_id)
        return extra

    def as_dict(self) -> dict[str, int]:
        return {"sets": self.sets, "duplicates": self.duplicates}

    def warn(self, path: str | Path) -> None:
        """One warning for the whole file (nothing when no set repeats a text)."""
        if self.duplicates:
            log.warning("%s: %d set(s) repeat a %s text (%d duplicate(s) in all); identical texts get identical "
                        "scores, so their judged difference cannot be recovered (first: %s)",
                        path, self.sets, self.what, self.duplicates, cut(self.first))


def duplicates_in(cands: pl.DataFrame, what: str = "candidate") -> DuplicateTexts:
    """The repeated ``doc`` texts per ``query_id`` of a candidates table (first: the lowest query id),
    e.g. for a fixture's metadata."""
    per = (cands.group_by("query_id").agg((pl.len() - pl.col("doc").n_unique()).alias("extra"))
           .filter(pl.col("extra") > 0).sort("query_id"))
    return DuplicateTexts(what, sets=per.height, duplicates=int(per["extra"].sum()) if per.height else 0,
                          first=str(per["query_id"][0]) if per.height else None)


__all__ = ["DuplicateTexts", "duplicates_in"]
