"""Scorers: one interface, several families, a registry of capability records.

A scorer is any object with a ``name`` and
``score(query, docs) -> list[GradeReadout]`` (one readout per document, in input
order) plus a batched ``score_prompts([(query, docs), ...])``. Presentations,
the first-stage pass, chunking and resumable output are written once around it
(:mod:`presdep.scoring.run`); CapCal recalibrates a stored run's probabilities
(:mod:`presdep.scoring.capcal`); BSC's averages are views (:mod:`presdep.views`).

Each registered name carries a :class:`Capabilities` record, so a variant asking
for something its scorer cannot do (an adapter, probabilities for CapCal, a batched
listwise prompt for BSC) is refused when the config is validated, before any job.
A user's own scorer is found through the ``presdep.scorers`` entry-point group
(package metadata): ``name = "module:factory"``; the factory may carry a
``capabilities`` attribute (a :class:`Capabilities` or a mapping of its fields).
Heavy backends import lazily.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

TASKS = ("rerank", "qa", "response")
ENTRY_POINT_GROUP = "presdep.scorers"


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


@dataclass(frozen=True)
class Capabilities:
    """What a scorer can do; the config check compares a variant's asks against it.

    ``reads``: "text" (documents) or "ids" (first-stage ranks only).
    ``probabilities``: returns P(grade 0..3) per document (CapCal needs them).
    ``adapter``: applies a variant's LoRA adapter (trained students need it).
    ``order_invariant``: a document's score does not depend on the order it is shown in.
    ``batched_listwise``: reads several documents in one prompt (BSC and the
    readout-specific rows only mean something for such a scorer).
    ``needs_gpu``: cannot run on CPU.  ``needs_model``: reads ``variant.model``.
    ``tasks``: the tasks whose rows it can serve.
    """

    reads: str = "text"
    probabilities: bool = False
    adapter: bool = False
    order_invariant: bool = False
    batched_listwise: bool = False
    needs_gpu: bool = False
    needs_model: bool = True
    tasks: tuple[str, ...] = TASKS

    def __post_init__(self):
        if self.reads not in ("text", "ids"):
            raise ValueError(f"Capabilities.reads must be 'text' or 'ids', got {self.reads!r}")
        bad = [t for t in self.tasks if t not in TASKS]
        if bad or not self.tasks:
            raise ValueError(f"Capabilities.tasks must be a non-empty subset of {TASKS}, got {self.tasks!r}")

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any], where: str) -> "Capabilities":
        known = {f.name for f in fields(cls)}
        extra = sorted(set(m) - known)
        if extra:
            raise ValueError(f"{where}: unknown capability field(s) {extra}; known: {sorted(known)}")
        kw = dict(m)
        if "tasks" in kw:
            kw["tasks"] = tuple(kw["tasks"])
        return cls(**kw)


@dataclass(frozen=True)
class ScorerEntry:
    """A registered scorer: ``factory`` is "module:function" taking (variant, protocol)."""

    name: str
    factory: str
    capabilities: Capabilities
    source: str = "presdep"  # or the distribution that provided the entry point


_READOUT = Capabilities(probabilities=True, adapter=True, batched_listwise=True)
_BUILTIN = (
    ScorerEntry("identity", "presdep.scoring.backends:make_identity",
                Capabilities(reads="ids", order_invariant=True, needs_model=False)),
    ScorerEntry("transformers", "presdep.scoring.backends:make_transformers", _READOUT),
    ScorerEntry("vllm", "presdep.scoring.vllm_backend:make_vllm",
                Capabilities(probabilities=True, adapter=True, batched_listwise=True, needs_gpu=True)),
    # Integer grades for a whole prompt: batched, but no probabilities and no model of ours.
    ScorerEntry("hosted", "presdep.training.hosted:make_hosted",
                Capabilities(batched_listwise=True, needs_model=False)),
    ScorerEntry("jina_listwise", "presdep.scoring.jina_listwise:make_jina_listwise",
                Capabilities(batched_listwise=True, tasks=("rerank", "qa"))),
    ScorerEntry("generative_listwise", "presdep.scoring.generative_listwise:make_generative_listwise",
                Capabilities(batched_listwise=True, tasks=("rerank", "qa"))),
    ScorerEntry("mxbai_rerank", "presdep.scoring.pointwise:make_mxbai_rerank",
                Capabilities(order_invariant=True, tasks=("rerank", "qa"))),
    ScorerEntry("cross_encoder", "presdep.scoring.pointwise:make_cross_encoder",
                Capabilities(order_invariant=True, tasks=("rerank", "qa"))),
    ScorerEntry("reward_model", "presdep.scoring.pointwise:make_reward_model",
                Capabilities(order_invariant=True, tasks=("response",))),
    # Pairwise within a prompt, both orders: invariant to order, not to which documents share it.
    ScorerEntry("pairrm", "presdep.scoring.pairrm:make_pairrm",
                Capabilities(order_invariant=True, tasks=("response",))),
)
BUILTIN: dict[str, ScorerEntry] = {e.name: e for e in _BUILTIN}
# name -> "module:factory" (the built-in names; entry points are added by registry()).
REGISTRY: dict[str, str] = {e.name: e.factory for e in _BUILTIN}


def _entry_point_entries() -> dict[str, ScorerEntry]:
    from importlib.metadata import entry_points

    out: dict[str, ScorerEntry] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN:
            raise ValueError(f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP} "
                             "shadows a built-in scorer; rename it")
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        try:
            factory = ep.load()
        except Exception as exc:  # a broken plug-in names itself
            raise ImportError(f"scorer plug-in {ep.name!r} ({ep.value}, from {dist}) failed to load: {exc}") from exc
        caps = getattr(factory, "capabilities", None)
        if caps is None:
            caps = Capabilities()
        elif isinstance(caps, Mapping):
            caps = Capabilities.from_mapping(caps, f"scorer plug-in {ep.name!r} ({ep.value})")
        elif not isinstance(caps, Capabilities):
            raise TypeError(f"scorer plug-in {ep.name!r}: 'capabilities' must be a Capabilities or a mapping")
        out[ep.name] = ScorerEntry(ep.name, ep.value, caps, source=dist)
    return out


@lru_cache(maxsize=1)
def registry() -> Mapping[str, ScorerEntry]:
    """Built-in scorers plus every ``presdep.scorers`` entry point installed."""
    return {**BUILTIN, **_entry_point_entries()}


def scorer_entry(name: str) -> ScorerEntry:
    reg = registry()
    if name not in reg:
        raise ValueError(f"unknown scorer {name!r}; registered: {sorted(reg)} "
                         f"(plug-ins register in the {ENTRY_POINT_GROUP!r} entry-point group)")
    return reg[name]


def variant_problems(name: str, variant: Mapping[str, Any], variants: Mapping[str, Mapping[str, Any]],
                     tasks: Sequence[str] = ()) -> list[str]:
    """What a variant asks of its scorer that the scorer's capability record lacks.

    ``variants`` is the whole table (CapCal checks the scorer of the run it reuses);
    ``tasks`` are the tasks of the eval datasets every variant runs on.
    """
    reg = registry()
    sc = variant.get("scorer")
    if sc not in reg:
        return [f"variants.{name}.scorer: unknown scorer {sc!r}; registered: {sorted(reg)} "
                f"(plug-ins: the {ENTRY_POINT_GROUP!r} entry-point group)"]
    caps = reg[sc].capabilities
    out = []

    def lacks(what: str, cap: str) -> None:
        out.append(f"variants.{name}: {what}, but scorer {sc!r} lacks capability {cap!r}")

    if variant.get("skip"):
        return out
    if (variant.get("adapter") or variant.get("student")) and not caps.adapter:
        lacks("a LoRA adapter / trained student", "adapter")
    if caps.needs_model and variant.get("model") is None and variant.get("calibration") != "capcal":
        out.append(f"variants.{name}: scorer {sc!r} needs a model (a key of models)")
    # ``variant`` is validated: the schema filled bsc_k, chunking and tasks.
    if variant["bsc_k"] > 1 and not caps.batched_listwise:
        lacks(f"BSC (bsc_k {variant['bsc_k']})", "batched_listwise")
    if variant["chunking"] != "contiguous" and not caps.batched_listwise:
        lacks(f"chunking {variant['chunking']!r}", "batched_listwise")
    if variant.get("calibration") == "capcal":
        src = variant.get("reuse_scores_of")
        src_sc = (variants.get(src) or {}).get("scorer") if src else None
        if src_sc in reg and not reg[src_sc].capabilities.probabilities:
            out.append(f"variants.{name}: CapCal needs grade probabilities, but the scorer {src_sc!r} of "
                       f"reuse_scores_of {src!r} lacks capability 'probabilities'")
    # The tasks this variant will be scored on: its own list (when the config has one) among
    # the eval datasets' tasks; each must be one its scorer serves.
    asked = set(variant["tasks"]) & set(tasks or TASKS)
    unserved = sorted(asked - set(caps.tasks))
    if unserved:
        out.append(f"variants.{name}: scored on task(s) {unserved}, but scorer {sc!r} serves only "
                   f"{list(caps.tasks)} (capability 'tasks'; set the variant's tasks)")
    return out


def serves(scorer: str, task: str) -> bool:
    """Whether a registered scorer can serve rows of ``task``."""
    return task in scorer_entry(scorer).capabilities.tasks


def make_scorer(variant: Mapping[str, Any], protocol: Mapping[str, Any]) -> Scorer:
    """Build the scorer named by ``variant["scorer"]`` (no guessing from model names)."""
    entry = scorer_entry(variant.get("scorer"))
    if variant.get("adapter") and not entry.capabilities.adapter:
        raise ValueError(f"variant {variant.get('name', '')!r}: scorer {entry.name!r} lacks capability 'adapter'")
    module, func = entry.factory.split(":")
    return getattr(importlib.import_module(module), func)(variant, protocol)


__all__ = ["PromptScorer", "GradeReadout", "Scorer", "Capabilities", "ScorerEntry", "BUILTIN", "REGISTRY", "ENTRY_POINT_GROUP",
           "registry", "scorer_entry", "variant_problems", "serves", "make_scorer"]
