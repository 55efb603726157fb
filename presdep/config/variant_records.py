"""The records of one variant: its entry, its student block and one scoring run of it.

:class:`Variant` is one entry of the config's ``variants:`` section (built by
:func:`_variant`), :class:`Student` its ``student:`` block, and :class:`ScoringRun` one
scoring run as its score job sees it (the variant, the models entry it reads and, for a
trained variant, the adapter chosen for one training seed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from presdep.config.record_values import _freeze, _is_int, thaw
from presdep.config.schema_enums import entry_enum
from presdep.config.scorer_specs import is_spec
from presdep.config.scorers import Capabilities, scorer_entry
from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import CHUNKINGS
from presdep.contracts.tasks import TASKS

# Keys every variant carries (the schema fills them in the workflow).
VARIANT_KEYS = ("scorer", "chunking", "calibration", "bsc_k", "bsc_ensembles")
CALIBRATIONS = entry_enum("variants", "calibration")


@dataclass(frozen=True)
class Student:
    objective: str
    teacher: str
    train: str
    heldout: str
    seeds: tuple[int, ...]
    lambdas: tuple[float, ...]
    device: str
    spec: Mapping[str, Any] = field(repr=False)

    def as_dict(self) -> dict:
        return thaw(self.spec)


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    scorer: str
    model: str | None
    chunking: str
    calibration: str
    bsc_k: int
    bsc_ensembles: int
    tasks: tuple[str, ...]
    reuse_scores_of: str | None
    skip: str | None
    student: Student | None
    spec: Mapping[str, Any] = field(repr=False)

    @property
    def runs(self) -> dict[str, int | None]:
        """Scoring runs of this variant: run key -> training seed (None when untrained)."""
        if self.student is None:
            return {self.name: None}
        return {f"{self.name}/seed{s}": s for s in self.student.seeds}

    @property
    def capabilities(self) -> Capabilities:
        """What its scorer can do and how its jobs run (the registry's record, never the name)."""
        return scorer_entry(self.scorer).capabilities

    def as_dict(self) -> dict:
        """The entry as plain data. A scorer named by a file adds the sha256 of the file's bytes
        (``scorer_sha256``): the rules pass this as params, so an edited file re-runs the jobs."""
        out = thaw(self.spec)
        if is_spec(self.scorer):
            out.update(scorer_entry(self.scorer).identity)
        return out

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any]) -> Variant:
        """From a validated entry (the config, or a job's params built from it): not checked again."""
        return _variant(name, _freeze(spec))

    @classmethod
    def checked(cls, spec: Mapping[str, Any], name: str | None = None) -> Variant:
        """From a library caller's mapping: the keys the schema would have filled must be there,
        with values the schema allows."""
        missing = [k for k in VARIANT_KEYS if k not in spec]
        if missing:
            raise InvalidInput(f"variant lacks {missing} (the validated config fills them from the schema): {dict(spec)}")
        if spec["chunking"] not in CHUNKINGS:
            raise InvalidInput(f"variant chunking {spec['chunking']!r} not in {CHUNKINGS}")
        if spec["calibration"] not in CALIBRATIONS:
            raise InvalidInput(f"variant calibration {spec['calibration']!r} not in {CALIBRATIONS}")
        if spec["calibration"] == "capcal" and "capcal_beta" not in spec:
            raise InvalidInput(f"variant with calibration capcal lacks 'capcal_beta' (alpha = beta * H(p)): {dict(spec)}")
        for key in ("bsc_k", "bsc_ensembles"):
            if not _is_int(spec[key]) or spec[key] < 1:
                raise InvalidInput(f"variant {key} must be an integer >= 1, got {spec[key]!r}")
        name = name if name is not None else str(spec.get("name", ""))
        return cls.from_spec(name, {"tasks": TASKS, **spec})


@dataclass(frozen=True)
class ScoringRun:
    """One scoring run as its score job sees it, built once: the variant, the models entry it
    reads (with ``name`` and, once fetched, ``path``), and for a trained variant the LoRA
    adapter that lambda selection chose for its training seed."""

    variant: Variant
    model: Mapping[str, Any] | None = None
    adapter: str | None = None
    training_seed: int | None = None

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def scorer(self) -> str:
        return self.variant.scorer

    @property
    def options(self) -> dict[str, Any]:
        """The variant's ``options:``, the settings of a scorer of one's own (plain data)."""
        return thaw(self.variant.spec.get("options") or {})

    def setting(self, key: str, default: Any = None) -> Any:
        """A scorer-specific setting of the variant: a key of its ``options:``, else one of its own
        keys (``window``, ``hosted``, ...)."""
        options = self.variant.spec.get("options") or {}
        if key in options:
            return thaw(options[key])
        return self.variant.spec.get(key, default)

    def model_entry(self) -> Mapping[str, Any]:
        if self.model is None:
            raise InvalidInput(f"variant {self.name!r} with scorer {self.scorer!r} needs a 'model'")
        return self.model

    def as_dict(self) -> dict:
        """Plain data for metadata and resume fingerprints: the variant with its model inline."""
        out = self.variant.as_dict()
        if self.model is not None:
            out["model"] = thaw(self.model)
        if self.adapter is not None:
            out["adapter"], out["training_seed"] = self.adapter, self.training_seed
        return out

    @classmethod
    def checked(cls, spec: Mapping[str, Any], name: str | None = None) -> ScoringRun:
        """From a library caller's mapping: a variant whose ``model`` is an entry (a mapping, or
        a local folder's path) and which may carry ``adapter`` and ``training_seed``."""
        spec = dict(spec)
        model = spec.get("model")
        if isinstance(model, (str, Path)):
            model = {"source": "local", "path": str(model)}
        adapter, seed = spec.pop("adapter", None), spec.pop("training_seed", None)
        if model is not None:
            spec["model"] = model.get("name") if isinstance(model, Mapping) else None
        variant = Variant.checked(spec, name)
        return cls(variant=variant, model=thaw(model) if model is not None else None,
                   adapter=str(adapter) if adapter else None, training_seed=seed)


def _variant(name: str, v: Mapping[str, Any]) -> Variant:
    student = None
    if v.get("student"):
        s = v["student"]
        lam = s["lambda"]
        student = Student(objective=s["objective"], teacher=s["teacher"], train=s["train"], heldout=s["heldout"],
                          seeds=tuple(s["seeds"]), device=s["device"],
                          lambdas=tuple(float(x) for x in (lam if isinstance(lam, tuple) else (lam,))), spec=s)
    return Variant(name=name, label=v.get("label", name), scorer=v["scorer"], model=v.get("model"),
                   chunking=v["chunking"], calibration=v["calibration"], bsc_k=v["bsc_k"],
                   bsc_ensembles=v["bsc_ensembles"], tasks=tuple(v["tasks"]), reuse_scores_of=v.get("reuse_scores_of"),
                   skip=v.get("skip"), student=student, spec=v)


__all__ = ["CALIBRATIONS", "VARIANT_KEYS", "ScoringRun", "Student", "Variant"]
