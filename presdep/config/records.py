"""The validated config frozen into typed records: what rules, scripts and library share.

Built once from the validated dict (:meth:`WorkflowConfig.from_validated`); every default
was filled by the schema before, so no record restates one.

The records of each section live in their own module (:mod:`presdep.config.dataset_records`,
:mod:`presdep.config.variant_records`, :mod:`presdep.config.training_records`); this one
builds :class:`WorkflowConfig` from them and re-exports them, so callers import every record
from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from presdep.config.dataset_records import DATASET_ROLES, Dataset, PromptSettings, Protocol, _dataset
from presdep.config.record_values import _freeze, thaw
from presdep.config.training_records import (
    STUDENT_KEYS,
    STUDENT_KEYS_OUTSIDE_TRAINING,
    TEACHER_KINDS,
    Teacher,
    TrainingSettings,
    _teacher,
)
from presdep.config.variant_records import CALIBRATIONS, VARIANT_KEYS, ScoringRun, Student, Variant, _variant
from presdep.contracts.errors import ConfigError


@dataclass(frozen=True)
class ReadCache:
    """Where model reads and reader answers are cached; an empty path means off."""

    enabled: bool
    dir: str
    answers_dir: str

    @property
    def scores_path(self) -> str:
        return self.dir if self.enabled else ""

    @property
    def answers_path(self) -> str:
        return self.answers_dir if self.enabled else ""


@dataclass(frozen=True)
class WorkflowConfig:
    """Everything the rules need, resolved once from the validated config."""

    raw: Mapping[str, Any] = field(repr=False)
    datasets: Mapping[str, Dataset]
    variants: Mapping[str, Variant]
    models: Mapping[str, Mapping[str, Any]]
    teachers: Mapping[str, Teacher]
    read_cache: ReadCache
    model_threads: int
    seed: int
    split_seed: int

    @classmethod
    def from_validated(cls, config: Mapping[str, Any]) -> WorkflowConfig:
        raw = _freeze(config)
        rc = raw["read_cache"]
        return cls(
            raw=raw,
            datasets=MappingProxyType({n: _dataset(n, raw) for n in raw["datasets"]}),
            variants=MappingProxyType({n: _variant(n, v) for n, v in raw["variants"].items()}),
            models=raw["models"],
            teachers=MappingProxyType({n: _teacher(n, t) for n, t in raw["teachers"].items()}),
            read_cache=ReadCache(enabled=rc["enabled"], dir=rc["dir"], answers_dir=rc["answers_dir"]),
            model_threads=raw["model_threads"],
            seed=raw["protocol"]["seed"],
            split_seed=raw["protocol"]["split_seed"],
        )

    # Sections the rules hand on whole (each validated and closed by the schema).
    @property
    def reader(self) -> Mapping[str, Any]:
        return self.raw["reader"]

    @property
    def verdict_reader(self) -> Mapping[str, Any]:
        return self.raw["verdict_reader"]

    @property
    def light_rules(self) -> str:
        """Where metrics, thresholds and matched_reference run under a cluster executor: cluster or local."""
        return self.raw["light_rules"]

    @property
    def stability(self) -> Mapping[str, Any]:
        return self.raw["stability"]

    @property
    def synthetic(self) -> Mapping[str, Any]:
        return self.raw["synthetic"]

    @property
    def synthetic_tasks(self) -> Mapping[str, Any]:
        return self.raw["synthetic_tasks"]

    @property
    def skipped_datasets(self) -> Mapping[str, str]:
        return self.raw["skipped_datasets"]

    @property
    def catalogue_overrides(self) -> Mapping[str, Any]:
        """Per catalogue id: the source location and sample sizes this config changes (a mirror, the rehearsal)."""
        return self.raw["catalogue_overrides"]

    @property
    def figure1(self) -> Mapping[str, Any] | None:
        return self.raw.get("figure1")

    @property
    def name(self) -> str | None:
        """The config's own output folder under results/ (None: results/ itself)."""
        return self.raw.get("name")

    @property
    def eval_datasets(self) -> list[str]:
        return [n for n, d in self.datasets.items() if d.role == "eval"]

    @property
    def table1_datasets(self) -> list[str]:
        """The eval datasets Table 1 averages: all but aliases (``alias_of``: another dataset under
        other settings, read by the appendix programs only)."""
        return [n for n in self.eval_datasets if not self.datasets[n].spec.get("alias_of")]

    def datasets_of_task(self, task: str) -> list[str]:
        return [n for n, d in self.datasets.items() if d.task == task]

    @property
    def runnable_variants(self) -> list[str]:
        return [n for n, v in self.variants.items() if not v.skip]

    @property
    def trained_variants(self) -> dict[str, Variant]:
        """Runnable variants with a ``student:`` block."""
        return {n: v for n, v in self.variants.items() if v.student and not v.skip}

    def single_order_run(self, task: str, seed: int) -> str | None:
        """The run key of single-order distillation for ``task`` at training seed ``seed`` (the target
        of the paper's matched retention); None when the config trains none for that seed."""
        for name, v in self.trained_variants.items():
            if v.student.objective == "single_order" and task in v.tasks and seed in v.student.seeds:
                return f"{name}/seed{seed}"
        return None

    def student_run_settings(self, variant: str, lam: float) -> dict:
        """Every behavioural setting of one student run of ``variant``: its ``student:`` block with
        the lambda list resolved to ``lam``, and its teacher's settings (the train_student job's)."""
        s = self.trained_variants[variant].student
        out = {k: v for k, v in s.as_dict().items() if k not in STUDENT_KEYS_OUTSIDE_TRAINING}
        out["lambda"] = lam
        out["teacher"] = s.teacher
        out["teacher_spec"] = self.usable_teachers[s.teacher].as_dict()
        out["train"], out["heldout"] = s.train, s.heldout
        return out

    @property
    def usable_teachers(self) -> dict[str, Teacher]:
        return {n: t for n, t in self.teachers.items() if not t.skip}

    @property
    def runs(self) -> dict[str, tuple[str, int | None]]:
        """Scoring runs of the runnable variants: run key -> (variant, training seed or None)."""
        return {run: (n, seed) for n in self.runnable_variants for run, seed in self.variants[n].runs.items()}

    def model(self, name: str) -> Mapping[str, Any]:
        if name not in self.models:
            raise ConfigError(f"model {name!r} is not a key of models ({sorted(self.models)})")
        return self.models[name]

    def variants_table(self, table: str = "table1") -> dict:
        """The settings of the variants reported in ``table`` (table1, or the opt-in controls) as
        plain data (the tables read labels, skips and tasks from it)."""
        return {n: v.as_dict() for n, v in self.variants.items() if v.spec["table"] == table}


__all__ = [
    "CALIBRATIONS", "DATASET_ROLES", "STUDENT_KEYS", "STUDENT_KEYS_OUTSIDE_TRAINING", "TEACHER_KINDS", "VARIANT_KEYS",
    "Dataset", "PromptSettings", "Protocol", "ReadCache", "ScoringRun", "Student", "Teacher", "TrainingSettings",
    "Variant", "WorkflowConfig", "thaw",
]
