"""The records of one dataset: its entry, its resolved evaluation protocol and its prompt settings.

:class:`Dataset` is one entry of the config's ``datasets:`` section; :class:`Protocol` the
protocol it is evaluated under (the dataset's own settings over the global ``protocol:``
section, resolved by :func:`_dataset`); :class:`PromptSettings` what a scorer needs of it to
build its prompts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from presdep.config.query_lists import QueryList
from presdep.config.record_values import _freeze, _is_int, thaw
from presdep.config.schema_enums import entry_enum
from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import NO_NOISE_REREADS, PAPER_SHUFFLE_RULE, PERTURBATIONS, SHUFFLE_RULES
from presdep.contracts.tasks import TASKS

# Enums a library caller's mapping is checked against: the schema's own.
DATASET_ROLES = entry_enum("datasets", "role")


@dataclass(frozen=True)
class PromptSettings:
    """What a scorer needs from a dataset's protocol to build its prompts.

    ``max_doc_chars`` None: documents are not cut; ``instruction`` None: the template's own;
    ``rubric`` None: the relevance rubric.
    """

    max_doc_chars: int | None = None
    instruction: str | None = None
    rubric: str | None = None

    @classmethod
    def checked(cls, m: Mapping[str, Any]) -> PromptSettings:
        """From a library caller's mapping (unknown keys refused)."""
        extra = sorted(set(m) - {"max_doc_chars", "instruction", "rubric"})
        if extra:
            raise InvalidInput(f"prompt settings: unknown key(s) {extra}; known: max_doc_chars, instruction, rubric")
        mdc = m.get("max_doc_chars")
        if mdc is not None and (not _is_int(mdc) or mdc < 1):
            raise InvalidInput(f"prompt settings: max_doc_chars must be an integer >= 1, got {mdc!r}")
        return cls(max_doc_chars=mdc, instruction=m.get("instruction"), rubric=m.get("rubric"))


@dataclass(frozen=True)
class Protocol:
    """The evaluation protocol of ONE dataset: the dataset's own settings over the global ones.

    ``shuffle_rule``: how random shuffle m is drawn (presdep.contracts.presentations);
    ``shuffle_queries``: the fixed list of queries whose shuffles are scored (None: all);
    ``noise_rereads``: R re-reads of the first-stage presentation in other batch compositions
    (0 = off; docs/methods/tau-psi.md#the-noise-floor-tau_psi_noise).
    """

    seed: int
    M: int
    B: int
    max_doc_chars: int
    perturbations: tuple[str, ...]
    instruction: str | None = None
    rubric: str | None = None
    shuffle_rule: str = PAPER_SHUFFLE_RULE
    shuffle_queries: QueryList | None = None
    noise_rereads: int = NO_NOISE_REREADS

    @property
    def prompt(self) -> PromptSettings:
        return PromptSettings(max_doc_chars=self.max_doc_chars, instruction=self.instruction, rubric=self.rubric)

    def as_dict(self) -> dict:
        return {"seed": self.seed, "M": self.M, "B": self.B, "max_doc_chars": self.max_doc_chars,
                "perturbations": list(self.perturbations), "instruction": self.instruction, "rubric": self.rubric,
                "shuffle_rule": self.shuffle_rule,
                "shuffle_queries": self.shuffle_queries.as_dict() if self.shuffle_queries else None,
                "noise_rereads": self.noise_rereads}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Protocol:
        """Rebuilt from :meth:`as_dict` (a job's params): already validated, not checked again."""
        return cls(seed=d["seed"], M=d["M"], B=d["B"], max_doc_chars=d["max_doc_chars"],
                   perturbations=tuple(d["perturbations"]), instruction=d.get("instruction"), rubric=d.get("rubric"),
                   shuffle_rule=d.get("shuffle_rule", PAPER_SHUFFLE_RULE),
                   shuffle_queries=QueryList.from_dict(d.get("shuffle_queries")),
                   noise_rereads=d.get("noise_rereads", NO_NOISE_REREADS))

    @classmethod
    def checked(cls, p: Mapping[str, Any]) -> Protocol:
        """From a library caller's mapping: every check the schema makes for the workflow."""
        for key in ("seed", "M", "B", "perturbations", "max_doc_chars"):
            if key not in p:
                raise InvalidInput(f"protocol lacks {key!r}; got keys {sorted(p)}")
        for key in ("seed", "M", "B", "max_doc_chars"):
            if not _is_int(p[key]):
                raise InvalidInput(f"protocol {key} must be an integer, got {p[key]!r}")
        if p["B"] < 1 or p["M"] < 0 or p["max_doc_chars"] < 1:
            raise InvalidInput(f"protocol needs B >= 1, M >= 0, max_doc_chars >= 1: {dict(p)}")
        perts = list(p["perturbations"])
        bad = [x for x in perts if x not in PERTURBATIONS]
        if bad or len(set(perts)) != len(perts):
            raise InvalidInput(f"protocol perturbations {perts} must be distinct names from {PERTURBATIONS}")
        if p["M"] < 1 and ({"random_shuffle", "within_chunk"} & set(perts)):
            raise InvalidInput("protocol M must be >= 1 for random_shuffle / within_chunk")
        rereads = p.get("noise_rereads", NO_NOISE_REREADS)
        if not _is_int(rereads) or rereads < 0 or rereads == 1:
            raise InvalidInput(f"protocol noise_rereads must be 0 (off) or an integer >= 2 (a tau-PSI needs two "
                               f"reads), got {rereads!r}")
        rule = p.get("shuffle_rule", PAPER_SHUFFLE_RULE)
        if rule not in SHUFFLE_RULES:
            raise InvalidInput(f"protocol shuffle_rule {rule!r} is not one of {SHUFFLE_RULES}")
        sq = p.get("shuffle_queries")
        if sq is not None and not isinstance(sq, (Mapping, QueryList)):
            raise InvalidInput(f"protocol shuffle_queries must be a query list record or mapping, got {sq!r}")
        if isinstance(sq, Mapping) and "name" not in sq:
            sq = QueryList.from_spec(sq, where="protocol shuffle_queries")
        if isinstance(sq, QueryList):
            p = {**p, "shuffle_queries": sq.as_dict()}
        return cls.from_dict(p)


@dataclass(frozen=True)
class Dataset:
    name: str
    task: str
    role: str
    protocol: Protocol
    max_queries: int | None
    spec: Mapping[str, Any] = field(repr=False)  # the whole validated entry

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any], protocol: Protocol) -> Dataset:
        """From a validated entry and its resolved protocol (a job's params): not checked again."""
        spec = _freeze(spec)
        return cls(name=name, task=spec["task"], role=spec["role"], protocol=protocol,
                   max_queries=spec.get("max_queries"), spec=spec)

    @classmethod
    def checked(cls, name: str, spec: Mapping[str, Any], protocol: Protocol) -> Dataset:
        """From a library caller's mapping: a known task, a candidates source and a protocol."""
        if spec.get("task") not in TASKS:
            raise InvalidInput(f"dataset {name!r}: task {spec.get('task')!r} not in {TASKS}")
        if spec.get("role") not in DATASET_ROLES:
            raise InvalidInput(f"dataset {name!r}: role {spec.get('role')!r} not in {DATASET_ROLES}")
        if not isinstance(spec.get("candidates"), Mapping) or "format" not in spec["candidates"]:
            raise InvalidInput(f"dataset {name!r}: needs a candidates source with a format")
        for key in ("max_queries", "k_input"):
            value = spec.get(key)
            if value is not None and (not _is_int(value) or value < 1):
                raise InvalidInput(f"dataset {name!r}: {key} must be an integer >= 1, got {value!r}")
        return cls.from_spec(name, spec, protocol)

    @property
    def candidates(self) -> Mapping[str, Any]:
        return self.spec["candidates"]

    @property
    def qrels(self) -> Mapping[str, Any] | None:
        return self.spec.get("qrels")

    def as_dict(self) -> dict:
        return thaw(self.spec)


def _dataset(name: str, raw: Mapping[str, Any]) -> Dataset:
    spec, proto = raw["datasets"][name], raw["protocol"]
    protocol = Protocol(
        seed=proto["seed"],
        M=spec.get("M", proto["M"]),
        B=spec.get("B", proto["B"][spec["task"]]),
        max_doc_chars=spec.get("max_doc_chars", proto["max_doc_chars"][spec["task"]]),
        perturbations=tuple(spec.get("perturbations", proto["perturbations"])),
        instruction=spec.get("instruction", proto["instruction"][spec["task"]]),
        rubric=spec.get("rubric", proto["rubric"][spec["task"]]),
        shuffle_rule=spec.get("shuffle_rule", proto["shuffle_rule"]),
        shuffle_queries=QueryList.from_spec(spec.get("shuffle_queries"), where=f"datasets.{name}.shuffle_queries"),
        noise_rereads=proto["noise_rereads"],
    )
    return Dataset(name=name, task=spec["task"], role=spec["role"], protocol=protocol,
                   max_queries=spec.get("max_queries"), spec=spec)


__all__ = ["DATASET_ROLES", "Dataset", "PromptSettings", "Protocol"]
