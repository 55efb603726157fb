"""One document of a corpus, as every loader yields it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Doc:
    doc_id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """What is indexed and shown to a scorer: title and text on separate lines."""
        return f"{self.title}\n{self.text}" if self.title.strip() else self.text
