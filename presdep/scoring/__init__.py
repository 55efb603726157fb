"""Scorers: one interface, several backends, a registry keyed by explicit names.

A scorer is any object with a ``name`` and
``score(query, docs) -> list[GradeReadout]`` (one readout per document, in input
order) plus a batched ``score_prompts([(query, docs), ...])``. Presentations,
the first-stage pass, chunking and resumable output are written once around it
(:mod:`presdep.scoring.run`); CapCal recalibrates a stored run's probabilities
(:mod:`presdep.scoring.capcal`); BSC's averages are views (:mod:`presdep.views`).
Heavy backends import lazily.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable


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


# name -> "module:factory"; the factory takes (variant, protocol) and returns a Scorer.
REGISTRY: dict[str, str] = {
    "identity": "presdep.scoring.backends:make_identity",
    "transformers": "presdep.scoring.backends:make_transformers",
    "vllm": "presdep.scoring.backends:make_vllm",
    "hosted": "presdep.training.hosted:make_hosted",
}


def make_scorer(variant: Mapping[str, Any], protocol: Mapping[str, Any]) -> Scorer:
    """Build the scorer named by ``variant["scorer"]`` (no guessing from model names)."""
    name = variant.get("scorer")
    if name not in REGISTRY:
        raise ValueError(f"unknown scorer {name!r}; registered: {sorted(REGISTRY)}")
    module, func = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), func)(variant, protocol)


__all__ = ["GradeReadout", "Scorer", "REGISTRY", "make_scorer"]
