"""What a scorer returns and the interface every scorer has.

A scorer is any object with a ``name`` and ``score(query, docs) -> list[GradeReadout]``
(one readout per document, in input order) plus a batched
``score_prompts([(query, docs), ...])``. A scorer whose capabilities say ``slot_reads`` also
answers ``score_slots([SlotRequest, ...])``: a prompt laid out as the request says (which
labels the shown documents carry, how many skeleton lines follow) and read at selected lines
only, one readout per line read (the context decomposition's arms need it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from presdep.contracts.errors import InvalidInput
from presdep.contracts.render_variants import Render


@dataclass(frozen=True)
class GradeReadout:
    """Expected grade of one document in one prompt; ``probs`` = P(0..3) or None."""

    score: float
    probs: tuple[float, float, float, float] | None = None


@dataclass(frozen=True)
class SlotRequest:
    """One prompt read at selected skeleton lines.

    ``docs`` are shown in order under the labels ``labels`` (1-based, ``[label] text``),
    the answer skeleton has ``lines`` lines ``[1] .. [lines]``, and ``read`` names the
    lines (1-based) whose grade is read, in the order their readouts come back. An
    ordinary prompt of n documents is labels 1..n, n lines, every line read. ``render`` changes
    the prompt's surface (the render perturbations: the lines' label strings, the separator, the
    rubric and its grade scale); None is the canonical surface.
    """

    query: str
    docs: tuple[str, ...]
    labels: tuple[int, ...]
    lines: int
    read: tuple[int, ...]
    render: Render | None = None

    def __post_init__(self):
        if not self.docs or len(self.labels) != len(self.docs):
            raise InvalidInput(f"a slot request shows at least one document, each under one label; got "
                             f"{len(self.docs)} documents and labels {self.labels}")
        if len(set(self.labels)) != len(self.labels) or not all(1 <= x <= self.lines for x in self.labels):
            raise InvalidInput(f"labels must be distinct lines of the {self.lines}-line skeleton; got {self.labels}")
        if not self.read or not all(1 <= x <= self.lines for x in self.read):
            raise InvalidInput(f"read must name lines of the {self.lines}-line skeleton; got {self.read}")
        line_labels = self.render.line_labels if self.render is not None else None
        if line_labels is not None and len(line_labels) != self.lines:
            raise InvalidInput(f"a render names {len(line_labels)} line labels for a {self.lines}-line skeleton")

    @classmethod
    def ordinary(cls, query: str, docs: Sequence[str], render: Render | None = None) -> "SlotRequest":
        n = len(docs)
        return cls(query, tuple(docs), tuple(range(1, n + 1)), n, tuple(range(1, n + 1)), render)


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
