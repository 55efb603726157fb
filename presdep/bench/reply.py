"""What a benchmark provider is and what it answers (one reply per task; a failed request keeps its error)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence


@dataclass(frozen=True)
class Reply:
    text: str | None
    error: str | None = None


class Provider(Protocol):
    model_id: str

    def describe(self) -> dict[str, Any]: ...

    def answer(self, tasks: Sequence[Mapping[str, Any]]) -> list[Reply]: ...
