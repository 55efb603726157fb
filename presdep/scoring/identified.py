"""A scorer whose identity names where its code came from and the options it was given.

A plug-in's own ``describe()`` cannot know the spec that named it, the sha256 of its file or the
variant's ``options``; the scores' metadata, a resume's fingerprint and the read cache's identity
(:mod:`presdep.scoring.read_through`) read ``describe()`` (or ``cache_identity()``), so this
wrapper adds them there. Everything else is the wrapped scorer's.
"""

from __future__ import annotations

from typing import Any, Mapping


class IdentifiedScorer:
    """``scorer`` with ``identity`` (spec, file sha256, options) added to what identifies it."""

    def __init__(self, scorer: Any, identity: Mapping[str, Any]):
        self.__dict__["scorer"] = scorer
        self.__dict__["identity"] = dict(identity)

    # The wrapped scorer answers for everything this class does not define.
    def __getattr__(self, name: str) -> Any:
        scorer = self.__dict__["scorer"]
        if name == "cache_identity" and hasattr(scorer, "cache_identity"):
            return lambda: {**scorer.cache_identity(), "scorer_identity": self.__dict__["identity"]}
        return getattr(scorer, name)

    def __setattr__(self, name: str, value: Any) -> None:  # hooks (on_progress) go to the scorer
        setattr(self.__dict__["scorer"], name, value)

    def describe(self) -> dict:
        scorer = self.__dict__["scorer"]
        own = scorer.describe() if hasattr(scorer, "describe") else {"scorer": getattr(scorer, "name", "?")}
        return {**own, "scorer_identity": self.__dict__["identity"]}


__all__ = ["IdentifiedScorer"]
