"""The workflow config: validated against its closed schema, then frozen into typed records.

The config says WHAT to run (datasets, models, variants, protocol); profiles say WHERE.
Three rules keep a run honest about what it measures:

- every object of ``presdep/config.schema.yaml`` (:data:`SCHEMA_PATH`) is closed, so a misspelt key stops
  the workflow before any job runs, with the key's YAML path and the closest valid name;
- every default lives in the schema only: :func:`validate_config` fills them in while it
  validates, and nothing downstream restates one;
- rules and library read :class:`WorkflowConfig` (frozen records built once from the
  validated dict), so no layer re-derives a setting another layer already resolved.

Snakemake merges a ``--configfile`` recursively into the embedded default; for
``datasets`` and ``variants`` that would ADD a user's entries to the default's, so
:func:`apply_replacing_sections` lets a user file's sections replace them.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

import jsonschema
import yaml

from presdep import __version__

# The schema ships with the package: the workflow, the CLI and the benchmark read the same file.
SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
# Sections that a --configfile replaces wholesale instead of merging into.
REPLACING_SECTIONS = ("datasets", "variants", "synthetic", "synthetic_tasks")
TASKS = ("rerank", "qa", "response")
# Key names that would hold a secret: refused with a pointer to api_key_env.
_SECRET_NAMES = ("api_key", "key", "token", "authorization", "password", "secret")


class ConfigError(ValueError):
    """The config does not match its schema; the message lists every problem by YAML path."""


def load_yaml(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def apply_replacing_sections(config: dict, user_files: Iterable[str | Path]) -> dict:
    """Let the sections of user config files replace (not extend) the embedded default's.

    Later files win, as with Snakemake's own merge. Keys other than
    :data:`REPLACING_SECTIONS` keep Snakemake's recursive merge.
    """
    config = copy.deepcopy(config)
    replaced: dict[str, dict] = {}
    for path in user_files:
        data = load_yaml(path)
        for key in REPLACING_SECTIONS:
            if key in data:
                replaced[key] = copy.deepcopy(data[key] or {})
        # The default's Figure 1 example names the default's variants and datasets: it
        # cannot outlive them, so a file that replaces either must name its own (or none).
        if ("datasets" in data or "variants" in data) and "figure1" not in data:
            config.pop("figure1", None)
    config.update(replaced)
    return config


# ----------------------------------------------------------------- validation


def _defaults_validator(base=jsonschema.Draft202012Validator):
    """``base`` extended to fill each property's ``default`` as it validates (jsonschema's recipe)."""
    validate_properties = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults})


def _yaml_path(parts: Iterable[Any]) -> str:
    return ".".join(str(p) for p in parts) or "(top level)"


def _known_keys(schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[str]:
    """Property names an object schema admits, following local $ref and allOf."""
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return []
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        return _known_keys(target, root)
    keys = list(schema.get("properties", {}))
    for sub in schema.get("allOf", []):
        keys += _known_keys(sub, root)
    return keys


def _unknown_key_messages(error: jsonschema.ValidationError, root: Mapping[str, Any]) -> list[str]:
    known = _known_keys(error.schema, root)
    where = list(error.absolute_path)
    out = []
    for key in sorted(k for k in error.instance if k not in known):
        path = _yaml_path([*where, key])
        if str(key).lower() in _SECRET_NAMES:
            out.append(f"{path}: a secret never goes in the config; name the environment variable "
                       f"that holds it in 'api_key_env'")
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(sorted(known))}"
        out.append(f"{path}: unknown key; {hint}")
    return out


def _messages(error: jsonschema.ValidationError, root: Mapping[str, Any]) -> Iterator[str]:
    if error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(error.instance, dict):
        yield from _unknown_key_messages(error, root)
    elif error.context and error.validator in ("oneOf", "anyOf"):
        # The branch that got furthest says most about what was meant.
        best = jsonschema.exceptions.best_match(error.context)
        yield f"{_yaml_path(error.absolute_path)}: {best.message}"
    else:
        yield f"{_yaml_path(error.absolute_path)}: {error.message}"


def validate_config(config: Mapping[str, Any], schema_path: str | Path) -> dict:
    """A deep copy of ``config`` with every schema default filled in; :class:`ConfigError` otherwise.

    All problems are reported at once, each on its own line and named by YAML path
    (``datasets.dl19.candidates.fromat: unknown key; did you mean 'format'?``).
    """
    schema = load_yaml(schema_path)
    filled = copy.deepcopy(dict(config))
    validator = _defaults_validator()(schema)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(filled), key=lambda e: [str(p) for p in e.absolute_path]):
        problems += [m for m in _messages(error, schema) if m not in problems]
    if problems:
        raise ConfigError("invalid workflow config:\n  " + "\n  ".join(problems))
    _check_references(filled)
    return filled


def _check_references(config: Mapping[str, Any]) -> None:
    """Names that point at other entries must exist (the schema cannot say so)."""
    models, datasets, teachers = config["models"], config["datasets"], config["teachers"]
    problems = []
    for name, v in config["variants"].items():
        if v.get("model") is not None and v["model"] not in models:
            problems.append(f"variants.{name}.model: {v['model']!r} is not a key of models ({sorted(models)})")
        student = v.get("student")
        if student:
            if student["teacher"] not in teachers:
                problems.append(f"variants.{name}.student.teacher: {student['teacher']!r} is not a key of teachers")
            for role in ("train", "heldout"):
                ds = student[role]
                if ds not in datasets:
                    problems.append(f"variants.{name}.student.{role}: {ds!r} is not a key of datasets")
                elif datasets[ds]["role"] != role:
                    problems.append(f"variants.{name}.student.{role}: dataset {ds!r} has role "
                                    f"{datasets[ds]['role']!r}, expected {role!r}")
    # Each variant against its scorer's capability record (built-in or plug-in).
    from presdep.scoring import variant_problems

    eval_tasks = sorted({d["task"] for d in datasets.values() if d["role"] == "eval"})
    for name, v in config["variants"].items():
        problems.extend(variant_problems(name, v, config["variants"], eval_tasks))
    for name, t in teachers.items():
        if t["kind"] == "open_weight" and t["model"] not in models:
            problems.append(f"teachers.{name}.model: {t['model']!r} is not a key of models ({sorted(models)})")
        if t["kind"] == "hosted" and t["provider"] == "openai" and "base_url" not in t and not t.get("skip"):
            problems.append(f"teachers.{name}: a hosted teacher needs base_url")
    reader = config["reader"]
    if reader.get("model") is not None and reader["model"] not in models:
        problems.append(f"reader.model: {reader['model']!r} is not a key of models ({sorted(models)})")
    qa = [d for d, spec in datasets.items() if spec["task"] == "qa"]
    if qa and reader.get("model") is None:
        problems.append(f"reader.model: QA datasets {qa} need a frozen reader (a key of models)")
    if problems:
        raise ConfigError("invalid workflow config:\n  " + "\n  ".join(problems))


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
class Protocol:
    """The evaluation protocol of ONE dataset: the dataset's own settings over the global ones."""

    seed: int
    M: int
    B: int
    max_doc_chars: int
    perturbations: tuple[str, ...]
    instruction: str
    rubric: str

    def as_dict(self) -> dict:
        return {"seed": self.seed, "M": self.M, "B": self.B, "max_doc_chars": self.max_doc_chars,
                "perturbations": list(self.perturbations), "instruction": self.instruction, "rubric": self.rubric}


@dataclass(frozen=True)
class Dataset:
    name: str
    task: str
    role: str
    protocol: Protocol
    max_queries: int | None
    spec: Mapping[str, Any] = field(repr=False)  # the whole validated entry

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
    spec: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    scorer: str
    model: str | None
    chunking: str
    calibration: str
    bsc_k: int
    skip: str | None
    student: Student | None
    spec: Mapping[str, Any] = field(repr=False)

    @property
    def runs(self) -> dict[str, int | None]:
        """Scoring runs of this variant: run key -> training seed (None when untrained)."""
        if self.student is None:
            return {self.name: None}
        return {f"{self.name}/seed{s}": s for s in self.student.seeds}


@dataclass(frozen=True)
class Teacher:
    name: str
    kind: str
    model: str
    T: int
    skip: str | None
    spec: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class WorkflowConfig:
    """Everything the rules need, resolved once from the validated config."""

    raw: Mapping[str, Any] = field(repr=False)
    datasets: Mapping[str, Dataset]
    variants: Mapping[str, Variant]
    models: Mapping[str, Mapping[str, Any]]
    teachers: Mapping[str, Teacher]

    @classmethod
    def from_validated(cls, config: Mapping[str, Any]) -> "WorkflowConfig":
        raw = _freeze(config)
        return cls(
            raw=raw,
            datasets=MappingProxyType({n: _dataset(n, raw) for n in raw["datasets"]}),
            variants=MappingProxyType({n: _variant(n, v) for n, v in raw["variants"].items()}),
            models=raw["models"],
            teachers=MappingProxyType({n: _teacher(n, t) for n, t in raw["teachers"].items()}),
        )

    @property
    def eval_datasets(self) -> list[str]:
        return [n for n, d in self.datasets.items() if d.role == "eval"]

    @property
    def runnable_variants(self) -> list[str]:
        return [n for n, v in self.variants.items() if not v.skip]

    @property
    def runs(self) -> dict[str, tuple[str, int | None]]:
        """Scoring runs of the runnable variants: run key -> (variant, training seed or None)."""
        return {run: (n, seed) for n in self.runnable_variants for run, seed in self.variants[n].runs.items()}


def _dataset(name: str, raw: Mapping[str, Any]) -> Dataset:
    spec, proto = raw["datasets"][name], raw["protocol"]
    protocol = Protocol(
        seed=int(proto["seed"]),
        M=int(spec.get("M", proto["M"])),
        B=int(spec.get("B", proto["B"][spec["task"]])),
        max_doc_chars=int(spec.get("max_doc_chars", proto["max_doc_chars"][spec["task"]])),
        perturbations=tuple(spec.get("perturbations", proto["perturbations"])),
        instruction=str(spec.get("instruction", proto["instruction"][spec["task"]])),
        rubric=str(spec.get("rubric", proto["rubric"][spec["task"]])),
    )
    return Dataset(name=name, task=spec["task"], role=spec["role"], protocol=protocol,
                   max_queries=spec.get("max_queries"), spec=spec)


def _variant(name: str, v: Mapping[str, Any]) -> Variant:
    student = None
    if v.get("student"):
        s = v["student"]
        lam = s["lambda"]
        student = Student(objective=s["objective"], teacher=s["teacher"], train=s["train"], heldout=s["heldout"],
                          seeds=tuple(int(x) for x in s["seeds"]),
                          lambdas=tuple(float(x) for x in (lam if isinstance(lam, tuple) else (lam,))), spec=s)
    return Variant(name=name, label=str(v.get("label", name)), scorer=v["scorer"], model=v.get("model"),
                   chunking=v["chunking"], calibration=v["calibration"], bsc_k=int(v["bsc_k"]),
                   skip=v.get("skip"), student=student, spec=v)


def _teacher(name: str, t: Mapping[str, Any]) -> Teacher:
    return Teacher(name=name, kind=t["kind"], model=t["model"], T=int(t["T"]), skip=t.get("skip"), spec=t)


def load_workflow_config(config: Mapping[str, Any], schema_path: str | Path) -> tuple[dict, WorkflowConfig]:
    """Expand catalogue datasets, validate (filling defaults) and build the records: (filled plain dict, records)."""
    from presdep.catalogue import expand_catalogue

    filled = validate_config(expand_catalogue(config), schema_path)
    return filled, WorkflowConfig.from_validated(filled)


def schema_defaults(schema_path: str | Path) -> dict[str, Any]:
    """Every default the schema declares, keyed by its YAML path (``*`` for any entry's name)."""
    schema = load_yaml(schema_path)
    out: dict[str, Any] = {}

    def walk(node: Any, path: list[str]) -> None:
        if not isinstance(node, dict):
            return
        if "$ref" in node and str(node["$ref"]).startswith("#/"):
            target: Any = schema
            for part in node["$ref"][2:].split("/"):
                target = target[part]
            walk(target, path)
        for name, sub in node.get("properties", {}).items():
            if isinstance(sub, dict) and "default" in sub:
                out[_yaml_path([*path, name])] = sub["default"]
            walk(sub, [*path, name])
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], [*path, "*"])
        for sub in node.get("allOf", []):
            walk(sub, path)

    walk(schema, [])
    return out


def hosted_defaults(schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """The defaults of ``$defs.hosted_settings``: how a hosted endpoint is called unless told otherwise."""
    props = load_yaml(schema_path)["$defs"]["hosted_settings"]["properties"]
    return {k: copy.deepcopy(v["default"]) for k, v in props.items() if "default" in v}


# ----------------------------------------------------------------- helpers kept for the rules


def protocol_for(config: Mapping[str, Any], dataset: str) -> dict:
    """The resolved protocol of one dataset, as plain data for rule params."""
    return _dataset(dataset, _freeze(config)).protocol.as_dict()


def block_size(config: Mapping[str, Any], dataset: str) -> int:
    """B for a dataset: its own ``B`` if set, else the protocol's B for its task."""
    return protocol_for(config, dataset)["B"]


def variant_config(config: Mapping[str, Any], variant: str) -> dict:
    """A variant's settings with the model entry it names resolved inline."""
    v = copy.deepcopy(dict(config["variants"][variant]))
    model = v.get("model")
    if isinstance(model, str):
        if model not in config["models"]:
            raise ConfigError(f"variants.{variant}.model: {model!r} is not a key of models")
        v["model_name"] = model
        v["model"] = copy.deepcopy(config["models"][model])
    return v


def runnable_variants(config: Mapping[str, Any]) -> list[str]:
    """Variants that run here; the others carry a ``skip`` reason shown in the table."""
    return [name for name, v in config["variants"].items() if not v.get("skip")]


def variant_label(config: Mapping[str, Any], variant: str) -> str:
    return str(config["variants"][variant].get("label", variant))


def rule_params(*parts: Any) -> dict:
    """Params for a rule: the package version plus every behavioural setting, as plain data.

    Snakemake's ``--rerun-triggers params`` compares these, so any change re-runs the job.
    """
    out: dict[str, Any] = {"presdep_version": __version__}
    for i, p in enumerate(parts):
        out[f"p{i}"] = copy.deepcopy(thaw(p))
    return out
