"""What a scorer returns and the interface every scorer has.

A scorer is any object with a ``name`` and ``score(query, docs) -> list[GradeReadout]``
(one readout per document, in input order) plus a batched
``score_prompts([(query, docs), ...])``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class GradeReadout:
    """Expected grade of one document in one prompt; ``probs`` = P(0..3) or None."""

    score: float
    probs: tuple[float, float, float, float] | None = None


@runtime_checkable
class Scorer(Protocol):
    name: str

    def score(self, query: str, docs: Sequence[str]) -> list[GradeReadout]: ...

    def score_prompts(
        self, prompts: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[GradeReadout]]: ...


class PromptScorer:
    """Base of scorers built on ``score_prompts``: ``score`` is one prompt of it."""

    def score(self, query: str, docs: Sequence[str]) -> list[GradeReadout]:
        return self.score_prompts([(query, docs)])[0]  # type: ignore[attr-defined]
