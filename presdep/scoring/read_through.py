"""The run's read cache: every scorer that reads grade probabilities reads through it.

One rule for every backend (transformers, vLLM, a plug-in that declares probabilities):
an entry is one prompt's P(grade) per slot under the scorer's :meth:`cache_identity`, keyed
by the scorer's exact input (:attr:`Prepared.key`). So a BSC variant reuses the shuffles it
shares with off the shelf whichever backend reads them, and a killed job repeats at most
the batch in flight.

A scorer takes part natively by offering

- ``cache_identity() -> Mapping``: everything a read depends on besides its input;
- ``prepare(prompts) -> list[Prepared]``: each prompt's key, its length in tokens and what
  the scorer reads (the token ids and read positions of a causal-LM readout);
- ``read_prepared(items) -> list[ndarray]``: P(grade) per slot, float64 ``[slots, 4]``;
- optionally ``plan_batches(items) -> list[list[int]]``: the batches it reads in (a miss is
  claimed, read, stored and released batch by batch).

A plug-in that only has ``score_prompts`` but declares probabilities is adapted by
:class:`TextReads`: its key is the prompt's text (query and documents as the scorer got
them), its identity its ``describe()``, and its readouts' probabilities are stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import GradeReadout
from presdep.contracts.render_variants import DEFAULT_SCALE
from presdep.scoring.read_cache import ReadCache
from presdep.scoring.template import PromptTemplate, request_scale

log = logging.getLogger(__name__)

GRADES = np.arange(4, dtype=np.float64)
# How far a plug-in's score may be from E[g] of the probabilities it returns: its stored
# reads are turned back into readouts as E[g], so any other score would change on a hit.
SCORE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Prepared:
    """One prompt as a scorer reads it: its cache key, its length in tokens, what it reads."""

    key: str
    tokens: int
    item: Any


def token_batches(lengths: Sequence[int], max_prompts: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices of ``lengths`` in batches: longest first (ties in input order), cut at ``max_prompts``
    prompts and, when set, at ``max_tokens`` padded tokens (prompts x the batch's longest); a
    prompt longer than ``max_tokens`` is read alone."""
    if max_prompts < 1:
        raise InvalidInput(f"batch_size must be >= 1, got {max_prompts}")
    if max_tokens is not None and max_tokens < 1:
        raise InvalidInput(f"batch_tokens must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    at = 0
    while at < len(order):
        n = max_prompts
        if max_tokens is not None:  # the first is the longest: it sets the padded length
            n = min(n, max(1, max_tokens // max(1, lengths[order[at]])))
        batches.append(order[at : at + n])
        at += n
    return batches


def readouts_of(probs: Any) -> list[GradeReadout]:
    """One prompt's readouts from its P(grade) rows [slots, 4]: E[g] and the probabilities."""
    return [GradeReadout(float(row @ GRADES), tuple(float(x) for x in row)) for row in probs]


def request_readouts(requests: Sequence[Any], probs: Sequence[Any], template: PromptTemplate) -> list[list[GradeReadout]]:
    """Readouts of slot requests from their P(grade) rows: E[g] and the probabilities on the 0-3
    scale; on a render's other scale its mapped score in the 0-3 units, without probabilities."""
    out = []
    for request, p in zip(requests, probs, strict=True):
        scale = request_scale(request, template)
        out.append(readouts_of(p) if scale.name == DEFAULT_SCALE else [GradeReadout(float(x)) for x in scale.score(p)])
    return out


def text_key(query: str, docs: Sequence[str]) -> str:
    """The key of a prompt a scorer reads as text: sha256 of its query and documents (JSON)."""
    return hashlib.sha256(json.dumps([query, list(docs)], ensure_ascii=False).encode("utf-8")).hexdigest()


class TextReads:
    """The native read interface for a scorer that only has ``score_prompts`` (and declares
    probabilities): keyed by text, identified by ``describe()``, its probabilities stored."""

    def __init__(self, scorer: Any):
        self.scorer = scorer

    def cache_identity(self) -> dict:
        describe = self.scorer.describe() if hasattr(self.scorer, "describe") else {}
        return {"scorer": getattr(self.scorer, "name", type(self.scorer).__name__), "describe": describe,
                "template_sha256": getattr(self.scorer, "template_sha256", None), "key": "text"}

    def prepare(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[Prepared]:
        return [Prepared(text_key(q, d), sum(len(x) for x in (q, *d)), (q, list(d))) for q, d in prompts]

    def read_prepared(self, items: Sequence[Prepared]) -> list[np.ndarray]:
        readouts = self.scorer.score_prompts([p.item for p in items])
        out = []
        for p, ro in zip(items, readouts, strict=True):
            if any(r.probs is None for r in ro):
                raise InvalidInput(f"scorer {self.scorer.name!r} declares probabilities but returned a readout "
                                   "without them")
            probs = np.asarray([r.probs for r in ro], dtype=np.float64).reshape(len(ro), 4)
            off = np.abs(probs @ GRADES - np.asarray([r.score for r in ro], dtype=np.float64))
            if off.size and off.max() > SCORE_TOLERANCE:
                raise InvalidInput(f"scorer {self.scorer.name!r} declares probabilities, but a score differs from "
                                   f"E[g] of its probabilities by {off.max():.3g} (a read served from the cache "
                                   f"is E[g]; tolerance {SCORE_TOLERANCE})")
            out.append(probs)
        return out


def native_reads(scorer: Any) -> bool:
    return all(hasattr(scorer, m) for m in ("cache_identity", "prepare", "read_prepared"))


def reads_probabilities(scorer: Any, declared: bool) -> bool:
    """Whether a scorer's reads go through the run's cache: it has the native interface, or its
    registered capabilities (``declared``) or the object itself say it returns probabilities."""
    if getattr(scorer, "first_stage", False):
        return False
    return native_reads(scorer) or declared or bool(getattr(scorer, "probabilities", False))


class ReadThrough:
    """A scorer read through a :class:`ReadCache`: only prompts never read under its identity
    reach it. Everything else (its name, description, counters, noise re-reads) is the scorer's."""

    def __init__(self, scorer: Any, root: Any):
        self.__dict__["scorer"] = scorer
        self.__dict__["reads"] = scorer if native_reads(scorer) else TextReads(scorer)
        self.__dict__["cache"] = ReadCache(root, self.reads.cache_identity())
        self.__dict__["waited_for_other_job"] = 0
        self.__dict__["_on_progress"] = None
        self.__dict__["_asked"] = 0
        self.__dict__["_distinct"] = set()

    # The wrapped scorer answers for everything this class does not define.
    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["scorer"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "on_progress":
            self.__dict__["_on_progress"] = value
            if hasattr(self.scorer, "on_progress"):  # reads report their batches themselves
                self.scorer.on_progress = value
            return
        setattr(self.scorer, name, value)

    @property
    def read_cache(self) -> ReadCache:
        return self.cache

    @property
    def prompts_asked(self) -> int:
        return getattr(self.scorer, "prompts_asked", self._asked)

    @property
    def distinct_prompts(self) -> int:
        return getattr(self.scorer, "distinct_prompts", len(self._distinct))

    def _progress(self, prompts: int) -> None:
        if self._on_progress is not None and prompts:
            self._on_progress(prompts, 0)

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        return [readouts_of(p) for p in self.slot_probs(prompts)]

    def score(self, query: str, docs: Sequence[str]) -> list[GradeReadout]:
        return self.score_prompts([(query, docs)])[0]

    def score_slots(self, requests: Sequence[Any]) -> list[list[GradeReadout]]:
        """Slot requests through the cache: only a scorer that builds them natively takes them (a
        text-keyed plug-in would key a request by its documents alone)."""
        if not hasattr(self.scorer, "score_slots") or not native_reads(self.scorer):
            raise InvalidInput(f"scorer {getattr(self.scorer, 'name', '?')!r} cannot read selected slots "
                               "(capability slot_reads)")
        return request_readouts(requests, self.slot_probs(requests), self.scorer.builder.template)

    def slot_probs(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[np.ndarray]:
        """P(grade) per slot for each prompt, float64 ``[slots, 4]``: stored reads, and the rest
        read once each (a repeated prompt too), claimed batch by batch across concurrent jobs
        (:meth:`presdep.runtime.content_cache.ContentCache.claim`); prompts another job has
        claimed are waited for after this job's own."""
        items = self.reads.prepare(prompts)
        keys = [p.key for p in items]
        self.__dict__["_asked"] += len(items)
        self._distinct.update(keys)
        found = self.cache.lookup(keys)  # includes reads other jobs finished meanwhile
        uses = Counter(keys)
        first: dict[str, Prepared] = {}  # key -> its first prompt (a repeated prompt is read once)
        for p in items:
            if p.key not in found:
                first.setdefault(p.key, p)
        self._progress(sum(uses[k] for k in found))  # hits, answered at once
        if first:
            found.update(self._read_claimed(list(first.values()), uses))
        return [found[k].copy() for k in keys]

    def _batches(self, items: Sequence[Prepared]) -> list[list[Prepared]]:
        plan: Callable | None = getattr(self.reads, "plan_batches", None)
        if plan is None:
            size = max(1, int(getattr(self.scorer, "batch_size", None) or len(items) or 1))
            idx = token_batches([p.tokens for p in items], size)
        else:
            idx = plan(items)
        return [[items[i] for i in b] for b in idx]

    def _read_claimed(self, miss: list[Prepared], uses: Mapping[str, int]) -> dict[str, np.ndarray]:
        """The values of the ``miss`` prompts: read under this job's claims, or stored by the
        jobs holding the others' (waited for once this job's own are read)."""
        cache, out = self.cache, {}
        by_key = {p.key: p for p in miss}

        def read(part: list[Prepared]) -> None:
            for p, probs in zip(part, self.reads.read_prepared(part), strict=True):
                out[p.key] = probs
                cache.put(p.key, probs)
            cache.flush()
            cache.release([p.key for p in part])  # only once stored: a waiter finds the value when the claim goes
            self._progress(sum(uses[p.key] for p in part) - len(part))  # repeats of a prompt in this call

        def got(values: Mapping[str, np.ndarray]) -> None:  # read by other jobs since the lookup
            out.update(values)
            self.__dict__["waited_for_other_job"] += len(values)
            self._progress(sum(uses[k] for k in values))

        theirs: list[str] = []
        try:
            for batch in self._batches(miss):
                mine, stored, other = cache.claim([p.key for p in batch])
                got(stored)
                theirs += other
                if mine:
                    read([by_key[k] for k in mine])
            while theirs:
                stored, mine = cache.await_claimed(theirs)
                got(stored)
                theirs = [k for k in theirs if k not in stored and k not in mine]
                for batch in self._batches([by_key[k] for k in mine]):
                    read(batch)
        finally:
            cache.release_all()  # an error while reading: the claims go now, not when they go stale
        return out


def with_read_cache(scorer: Any, root: Any, *, declared: bool = False) -> Any:
    """``scorer`` read through the read cache under ``root`` when its reads are probabilities
    (see :func:`reads_probabilities`); else ``scorer`` itself."""
    if root is None or isinstance(scorer, ReadThrough) or not reads_probabilities(scorer, declared):
        return scorer
    return ReadThrough(scorer, root)


__all__ = ["Prepared", "ReadThrough", "TextReads", "readouts_of", "reads_probabilities", "request_readouts", "text_key",
           "token_batches", "with_read_cache"]
