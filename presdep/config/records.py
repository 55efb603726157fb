"""The validated config frozen into typed records: what rules, scripts and library share.

Built once from the validated dict (:meth:`WorkflowConfig.from_validated`); every default
was filled by the schema before, so no record restates one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from presdep.config.query_lists import QueryList
from presdep.config.schema_enums import entry_enum
from presdep.config.scorers import Capabilities, scorer_entry
from presdep.contracts.errors import ConfigError, InvalidInput
from presdep.contracts.presentations import (
    CHUNKINGS,
    NO_NOISE_REREADS,
    PAPER_SHUFFLE_RULE,
    PERTURBATIONS,
    SHUFFLE_RULES,
)
from presdep.contracts.tasks import TASKS

# ----------------------------------------------------------------- typed records


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain dicts and lists again (for rule params and JSON metadata)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


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


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


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
        return thaw(self.spec)

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


# Enums a library caller's mapping is checked against: the schema's own.
TEACHER_KINDS = entry_enum("teachers", "kind")
DATASET_ROLES = entry_enum("datasets", "role")
# Keys every variant carries (the schema fills them in the workflow).
VARIANT_KEYS = ("scorer", "chunking", "calibration", "bsc_k", "bsc_ensembles")
CALIBRATIONS = entry_enum("variants", "calibration")


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

    def setting(self, key: str, default: Any = None) -> Any:
        """A scorer-specific setting of the variant (``window``, ``hosted``, ...)."""
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


# Every setting the training loop reads; their defaults live in the workflow's config schema only.
# Keys of a student block that name the run's inputs or its set of runs, not how one run trains.
STUDENT_KEYS_OUTSIDE_TRAINING = ("teacher", "train", "heldout", "seeds", "lambda")
STUDENT_KEYS = ("objective", "lambda", "lambda_warmup_steps", "n_views", "view_seed_base", "steps", "batch_chunks",
                "lr", "lr_warmup_ratio", "weight_decay", "betas", "max_grad_norm", "checkpoint_every",
                "eval_batch_prompts", "debias_eps", "lora", "device", "dtype", "gradient_checkpointing",
                "checkpoint_every_layers", "micro_batch_tokens", "memory_margin", "lora_compute_dtype", "pad_mask")


@dataclass(frozen=True)
class TrainingSettings:
    """The settings of ONE student run: its variant's ``student:`` block with lambda resolved to
    one value (and the teacher, train and held-out names it was built with, in ``spec``)."""

    objective: str
    lam: float
    lambda_warmup_steps: int
    n_views: int
    view_seed_base: int
    steps: int
    batch_chunks: int
    lr: float
    lr_warmup_ratio: float
    weight_decay: float
    betas: tuple[float, float]
    max_grad_norm: float
    checkpoint_every: int
    eval_every: int
    eval_batch_prompts: int
    debias_eps: float
    lora: Mapping[str, Any]
    device: str
    dtype: str
    gradient_checkpointing: bool | str
    checkpoint_every_layers: int
    micro_batch_tokens: int | str
    memory_margin: float
    lora_compute_dtype: str
    pad_mask: bool | str
    spec: Mapping[str, Any] = field(repr=False)
    gpu_mem_gb: float | None = None

    def as_dict(self) -> dict:
        """The settings as plain data (resume fingerprints and done.json record them)."""
        return thaw(self.spec)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainingSettings:
        """From a job's params (the validated config): not checked again; ``eval_every`` defaults
        to ``checkpoint_every`` (evaluated adapters are the kept ones)."""
        spec = {**thaw(d)}
        if spec.get("eval_every") is None:
            spec["eval_every"] = spec["checkpoint_every"]
        kw = {k: spec[k] for k in STUDENT_KEYS if k != "lambda"}
        kw["betas"] = tuple(spec["betas"])
        return cls(lam=spec["lambda"], eval_every=spec["eval_every"], gpu_mem_gb=spec.get("gpu_mem_gb"),
                   spec=_freeze(spec), **kw)

    @classmethod
    def checked(cls, d: Mapping[str, Any]) -> TrainingSettings:
        """From a library caller's mapping: every key of STUDENT_KEYS, with values the schema allows."""
        missing = [k for k in STUDENT_KEYS if k not in d]
        if missing:
            raise InvalidInput(f"student settings lack {missing} (the config schema gives their defaults)")
        for key in ("steps", "batch_chunks", "checkpoint_every", "n_views"):
            if not _is_int(d[key]) or d[key] < 1:
                raise InvalidInput(f"student {key} must be a positive integer, got {d[key]!r}")
        if not 0.0 <= float(d["lr_warmup_ratio"]) <= 1.0:
            raise InvalidInput(f"student lr_warmup_ratio must be in [0, 1], got {d['lr_warmup_ratio']!r}")
        if len(d["betas"]) != 2 or not all(0.0 <= float(b) < 1.0 for b in d["betas"]):
            raise InvalidInput(f"student betas must be two numbers in [0, 1), got {d['betas']!r}")
        s = cls.from_dict(d)
        if s.eval_every % s.checkpoint_every:
            raise InvalidInput("student eval_every must be a multiple of checkpoint_every (evaluated adapters are kept)")
        return s


@dataclass(frozen=True)
class Teacher:
    name: str
    kind: str
    model: str
    T: int
    skip: str | None
    spec: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any]) -> Teacher:
        """From a validated entry (a job's params): not checked again."""
        return _teacher(name, _freeze(spec))

    @classmethod
    def checked(cls, name: str, spec: Mapping[str, Any]) -> Teacher:
        """From a library caller's mapping: a known kind and a number of shuffles T."""
        if spec.get("kind") not in TEACHER_KINDS:
            raise InvalidInput(f"teacher {name!r}: kind {spec.get('kind')!r} not in {TEACHER_KINDS}")
        if not _is_int(spec.get("T")) or spec["T"] < 1:
            raise InvalidInput(f"teacher {name!r}: 'T' (number of teacher shuffles) must be an integer >= 1, "
                               f"got {spec.get('T')!r}")
        return cls.from_spec(name, {"model": None, **spec})

    @property
    def open_weight(self) -> bool:
        return self.kind == "open_weight"

    @property
    def on_gpu(self) -> bool:
        return self.open_weight and self.spec.get("device") == "cuda"

    def as_dict(self) -> dict:
        return thaw(self.spec)


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

    def datasets_of_task(self, task: str) -> list[str]:
        return [n for n, d in self.datasets.items() if d.task == task]

    @property
    def runnable_variants(self) -> list[str]:
        return [n for n, v in self.variants.items() if not v.skip]

    @property
    def trained_variants(self) -> dict[str, Variant]:
        """Runnable variants with a ``student:`` block."""
        return {n: v for n, v in self.variants.items() if v.student and not v.skip}

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

    def variants_table(self) -> dict:
        """Every variant's settings as plain data (Table 1 reads labels, skips and tasks from it)."""
        return {n: v.as_dict() for n, v in self.variants.items()}


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


def _teacher(name: str, t: Mapping[str, Any]) -> Teacher:
    return Teacher(name=name, kind=t["kind"], model=t["model"], T=t["T"], skip=t.get("skip"), spec=t)
