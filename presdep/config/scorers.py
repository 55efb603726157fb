"""Which scorers exist and what each can do: capability records, built-ins and plug-ins.

Each registered name carries a :class:`Capabilities` record, so a variant asking
for something its scorer cannot do (an adapter, probabilities for CapCal, a batched
listwise prompt for BSC) is refused when the config is validated, before any job.
The record also says how a job of that scorer runs (its conda environment, whether it
takes the model thread count, its memory and time, whether it calls a hosted API), so
no rule tests a scorer by its name.

A user's own scorer is found through the ``presdep.scorers`` entry-point group
(package metadata): ``name = "module:factory"``, or named where it lives,
``scorer: "package.module:factory"`` or ``scorer: "path/to/file.py:factory"``
(:mod:`presdep.config.scorer_specs`; no install step). Either factory may carry a
``capabilities`` attribute (a :class:`Capabilities` or a mapping of its fields), read when
the config is checked. Registered factories are named as strings and imported only when a
scorer is built (:mod:`presdep.scoring.factory`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

from presdep.config.run_names import similar_names
from presdep.config.scorer_specs import FORMS, is_spec, load_spec
from presdep.contracts.errors import InvalidInput
from presdep.contracts.tasks import TASKS

ENTRY_POINT_GROUP = "presdep.scorers"


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
    ``slot_reads``: answers ``score_slots`` (a prompt laid out by a
    :class:`~presdep.contracts.readouts.SlotRequest`, read at selected lines; the context
    decomposition needs it).
    ``integer_grades``: returns whole grades that tie so often that a ranking's order is mostly
    tie-breaking; Table 1 does not report its tau-PSI (as in the paper's hosted row).

    How its ``score`` jobs run: ``env`` names the conda environment (``envs/<env>.yaml``);
    ``local_model`` says it runs a model on this machine's threads (so the job takes the
    config's ``model_threads`` and sets torch's thread count; otherwise one thread);
    ``mem_mb`` and ``runtime`` (minutes) are the job's resource requests; ``api_slots`` is
    how many of the cluster-wide ``teacher_api`` slots one job holds.
    """

    reads: str = "text"
    probabilities: bool = False
    adapter: bool = False
    order_invariant: bool = False
    batched_listwise: bool = False
    needs_gpu: bool = False
    needs_model: bool = True
    tasks: tuple[str, ...] = TASKS
    integer_grades: bool = False
    slot_reads: bool = False
    env: str = "gpu"
    local_model: bool = True
    mem_mb: int = 8000
    runtime: int = 240
    api_slots: int = 0

    def __post_init__(self):
        if self.reads not in ("text", "ids"):
            raise InvalidInput(f"Capabilities.reads must be 'text' or 'ids', got {self.reads!r}")
        bad = [t for t in self.tasks if t not in TASKS]
        if bad or not self.tasks:
            raise InvalidInput(f"Capabilities.tasks must be a non-empty subset of {TASKS}, got {self.tasks!r}")

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any], where: str) -> "Capabilities":
        known = {f.name for f in fields(cls)}
        extra = sorted(set(m) - known)
        if extra:
            raise InvalidInput(f"{where}: unknown capability field(s) {extra}; known: {sorted(known)}")
        kw = dict(m)
        if "tasks" in kw:
            kw["tasks"] = tuple(kw["tasks"])
        return cls(**kw)


@dataclass(frozen=True)
class ScorerEntry:
    """A scorer: ``factory`` is "module:function" taking (run, prompt).

    A scorer named by a spec (``module:factory``, ``file.py:factory``) has ``name`` = ``factory``
    = the spec, its ``loaded`` factory and, for a file, the ``sha256`` of the file's bytes.
    """

    name: str
    factory: str
    capabilities: Capabilities
    source: str = "presdep"  # or the distribution that provided the entry point, or "module" / "file"
    sha256: str | None = None
    loaded: Callable[..., Any] | None = field(default=None, compare=False, repr=False)

    @property
    def identity(self) -> dict[str, Any]:
        """What names this scorer's code in a run's record: the spec and, for a file, its sha256."""
        return {"scorer": self.name, **({"scorer_sha256": self.sha256} if self.sha256 else {})}


_READOUT = Capabilities(probabilities=True, adapter=True, batched_listwise=True, slot_reads=True)
_BUILTIN = (
    ScorerEntry("identity", "presdep.scoring.backends:make_identity",
                Capabilities(reads="ids", order_invariant=True, needs_model=False, env="cpu", local_model=False,
                             mem_mb=1000, runtime=10)),
    ScorerEntry("transformers", "presdep.scoring.backends:make_transformers", _READOUT),
    ScorerEntry("vllm", "presdep.scoring.vllm_backend:make_vllm",
                Capabilities(probabilities=True, adapter=True, batched_listwise=True, needs_gpu=True, slot_reads=True)),
    # Integer grades for a whole prompt: batched, but no probabilities and no model of ours.
    ScorerEntry("hosted", "presdep.training.hosted:make_hosted",
                Capabilities(batched_listwise=True, needs_model=False, integer_grades=True, env="hosted",
                             local_model=False, api_slots=1)),
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
    # PINE and its isolated control: the expected-grade readout of one listwise prompt (so
    # probabilities, BSC and every task), under a hand-written attention over the base model's
    # own modules, so no adapter.
    ScorerEntry("pine", "presdep.scoring.pine:make_pine",
                Capabilities(probabilities=True, batched_listwise=True, tasks=("rerank", "qa", "response"))),
    ScorerEntry("isolated_slots", "presdep.scoring.pine:make_isolated_slots",
                Capabilities(probabilities=True, batched_listwise=True, tasks=("rerank", "qa", "response"))),
)
BUILTIN: dict[str, ScorerEntry] = {e.name: e for e in _BUILTIN}
# name -> "module:factory" (the built-in names; entry points are added by registry()).
REGISTRY: dict[str, str] = {e.name: e.factory for e in _BUILTIN}


def _entry_point_entries() -> dict[str, ScorerEntry]:
    from importlib.metadata import entry_points

    out: dict[str, ScorerEntry] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN:
            raise InvalidInput(f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP} "
                             "shadows a built-in scorer; rename it")
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        try:
            factory = ep.load()
        except Exception as exc:  # a broken plug-in names itself
            raise ImportError(f"scorer plug-in {ep.name!r} ({ep.value}, from {dist}) failed to load: {exc}") from exc
        caps = capabilities_of(factory, f"scorer plug-in {ep.name!r} ({ep.value})")
        out[ep.name] = ScorerEntry(ep.name, ep.value, caps, source=dist)
    return out


def capabilities_of(factory: Any, where: str) -> Capabilities:
    """A plug-in factory's ``capabilities`` attribute as a record (none: the defaults)."""
    caps = getattr(factory, "capabilities", None)
    if caps is None:
        return Capabilities()
    if isinstance(caps, Mapping):
        return Capabilities.from_mapping(caps, where)
    if not isinstance(caps, Capabilities):
        raise TypeError(f"{where}: 'capabilities' must be a Capabilities or a mapping")
    return caps


def spec_entry(spec: str) -> ScorerEntry:
    """The scorer a spec names, its module imported or its file loaded now (so its capabilities
    are checked with the config); :class:`InvalidInput` in one line when it cannot be."""
    loaded = load_spec(spec)
    try:
        caps = capabilities_of(loaded.factory, f"scorer {spec!r}")
    except (TypeError, ValueError) as exc:
        raise InvalidInput(" ".join(str(exc).split())) from exc
    return ScorerEntry(spec, spec, caps, source="file" if loaded.sha256 else "module", sha256=loaded.sha256,
                       loaded=loaded.factory)


@lru_cache(maxsize=1)
def registry() -> Mapping[str, ScorerEntry]:
    """Built-in scorers plus every ``presdep.scorers`` entry point installed."""
    return {**BUILTIN, **_entry_point_entries()}


def scorer_entry(name: str) -> ScorerEntry:
    """A registered name's entry (built-ins, then entry points), else the scorer a spec names."""
    reg = registry()
    if name in reg:
        return reg[name]
    if is_spec(name):
        return spec_entry(name)
    raise InvalidInput(f"unknown scorer {name!r}; {similar_names(str(name), list(reg))}registered: {sorted(reg)} "
                       f"(plug-ins register in the {ENTRY_POINT_GROUP!r} entry-point group, or name {FORMS})")


def find_scorer(name: Any) -> ScorerEntry | None:
    """:func:`scorer_entry`, or None where the name is unknown or its spec does not load
    (:func:`variant_problems` says why)."""
    try:
        return scorer_entry(name)
    except InvalidInput:
        return None


def variant_problems(name: str, entry: Mapping[str, Any], entries: Mapping[str, Mapping[str, Any]],
                     tasks: Sequence[str] = ()) -> list[str]:
    """What a variant's config entry asks of its scorer that the scorer's capability record lacks.

    Part of validating the config (the records are built from entries that pass);
    ``entries`` is the whole variants table (CapCal checks the scorer of the run it reuses);
    ``tasks`` are the tasks of the eval datasets every variant runs on.
    """
    reg = registry()
    sc = entry.get("scorer")
    if sc not in reg and not is_spec(sc):
        return [f"variants.{name}.scorer: unknown scorer {sc!r}; {similar_names(str(sc), list(reg))}registered: {sorted(reg)} "
                f"(plug-ins: the {ENTRY_POINT_GROUP!r} entry-point group, or {FORMS})"]
    try:
        caps = scorer_entry(sc).capabilities
    except InvalidInput as exc:
        return [f"variants.{name}.scorer: {exc}"]
    out = []

    def lacks(what: str, cap: str) -> None:
        out.append(f"variants.{name}: {what}, but scorer {sc!r} lacks capability {cap!r}")

    if entry.get("skip"):
        return out
    if (entry.get("adapter") or entry.get("student")) and not caps.adapter:
        lacks("a LoRA adapter / trained student", "adapter")
    if caps.needs_model and entry.get("model") is None and entry.get("calibration") != "capcal":
        out.append(f"variants.{name}: scorer {sc!r} needs a model (a key of models)")
    # ``entry`` has passed the schema: it filled bsc_k, chunking and tasks.
    if entry["bsc_k"] > 1 and not caps.batched_listwise:
        lacks(f"BSC (bsc_k {entry['bsc_k']})", "batched_listwise")
    if entry["chunking"] != "contiguous" and not caps.batched_listwise:
        lacks(f"chunking {entry['chunking']!r}", "batched_listwise")
    if entry.get("calibration") == "capcal":
        src = entry.get("reuse_scores_of")
        src_entry = find_scorer((entries.get(src) or {}).get("scorer")) if src else None
        if src_entry is not None and not src_entry.capabilities.probabilities:
            out.append(f"variants.{name}: CapCal needs grade probabilities, but the scorer {src_entry.name!r} of "
                       f"reuse_scores_of {src!r} lacks capability 'probabilities'")
    # The tasks this variant will be scored on: its own list (when the config has one) among
    # the eval datasets' tasks; each must be one its scorer serves.
    asked = set(entry["tasks"]) & set(tasks or TASKS)
    unserved = sorted(asked - set(caps.tasks))
    if unserved:
        out.append(f"variants.{name}: scored on task(s) {unserved}, but scorer {sc!r} serves only "
                   f"{list(caps.tasks)} (capability 'tasks'; set the variant's tasks)")
    return out


def serves(scorer: str, task: str) -> bool:
    """Whether a registered scorer can serve rows of ``task``."""
    return task in scorer_entry(scorer).capabilities.tasks
