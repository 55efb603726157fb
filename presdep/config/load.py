"""Loading the workflow config: YAML, the closed schema with its defaults, the checks of references.

Snakemake merges a ``--configfile`` recursively into the embedded default; for
``datasets`` and ``variants`` that would ADD a user's entries to the default's, so
:func:`apply_replacing_sections` lets a user file's sections replace them.
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from presdep.config.aliases import expand_aliases
from presdep.config.bounds import bound_problems
from presdep.config.catalogue import expand_catalogue
from presdep.config.cross_refs import contrasts_base, cross_ref_problems, unknown_name
from presdep.config.feasibility import feasibility_problems
from presdep.config.paths import check_path_kinds
from presdep.config.programs import (
    context_problems,
    pool_problems,
    render_problems,
    verdict_reader_problems,
    width_problems,
)
from presdep.config.records import WorkflowConfig
from presdep.config.run_names import run_name_problem
from presdep.config.schema_enums import SCHEMA_PATH
from presdep.config.scorers import variant_problems
from presdep.config.secret_masking import api_key_env_problem, config_secrets, is_env_name, masked_text
from presdep.config.yaml_io import load_yaml
from presdep.contracts.errors import ConfigError

if TYPE_CHECKING:
    import jsonschema

# Sections that a --configfile replaces wholesale instead of merging into.
REPLACING_SECTIONS = ("datasets", "variants", "synthetic", "synthetic_tasks")
# Key names that would hold a secret: refused with a pointer to api_key_env.
_SECRET_NAMES = ("api_key", "key", "token", "authorization", "password", "secret")


def apply_replacing_sections(config: dict, user_files: Iterable[str | Path]) -> dict:
    """Let the sections of user config files replace (not extend) the embedded default's.

    The first user file that has such a section replaces the default's; a later file merges
    into it key by key, as Snakemake merges (so an overlay such as configs/rehearsal.yaml can
    resize the datasets and variants of configs/paper.yaml without repeating them). Keys other
    than :data:`REPLACING_SECTIONS` keep Snakemake's recursive merge.
    """
    config = copy.deepcopy(config)
    replaced: dict[str, dict] = {}
    for path in user_files:
        data = load_yaml(path)
        for key in REPLACING_SECTIONS:
            if key in data:
                section = copy.deepcopy(data[key] or {})
                replaced[key] = _merged(replaced[key], section) if key in replaced else section
        # The default's Figure 1 example names the default's variants and datasets: it
        # cannot outlive them, so a file that replaces either must name its own (or none).
        if ("datasets" in data or "variants" in data) and "figure1" not in data:
            config.pop("figure1", None)
    config.update(replaced)
    return config


def merge_config_files(paths: Iterable[str | Path], base: str | Path | None = None) -> dict:
    """The config Snakemake would hold: ``base`` (the Snakefile's ``configfile:``) with each file of
    ``paths`` merged in recursively, then :func:`apply_replacing_sections`. Not yet validated."""
    paths = list(paths)
    config: dict = load_yaml(base) or {} if base is not None else {}
    for path in paths:
        config = _merged(config, load_yaml(path) or {})
    return apply_replacing_sections(config, paths)


def _merged(base: Any, extra: Any) -> Any:
    """``extra`` merged into ``base``: mappings key by key, anything else replaced (Snakemake's rule)."""
    if not (isinstance(base, dict) and isinstance(extra, dict)):
        return extra
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(base[key], value) if key in base else value
    return out


def check_config_files(paths: Iterable[str | Path]) -> None:
    """Re-read each config file strictly (:func:`~presdep.config.yaml_io.load_yaml`).

    Snakemake parses ``workflow_config.yaml`` and every ``--configfile`` with its own YAML
    loader, which keeps the last of two equal keys silently; this refuses the file instead,
    naming it, the key and both lines, before any job runs.
    """
    for path in paths:
        load_yaml(path)


# ----------------------------------------------------------------- validation


def _defaults_validator(base=None):
    """``base`` extended to fill each property's ``default`` as it validates (jsonschema's recipe)."""
    # Imported here, not at the top: the records and YAML reader this package also holds are
    # imported by code that never validates a config (benchmarks/gpu.py on a bare GPU image).
    import jsonschema

    base = base or jsonschema.Draft202012Validator
    validate_properties = base.VALIDATORS["properties"]
    # jsonschema counts 1e12 and 2.0 as integers; a count that arrives as a float (a JSON config, a
    # --config value) would reach numpy and fail there, naming no key.
    whole = base.TYPE_CHECKER.redefine(
        "integer", lambda checker, instance: isinstance(instance, int) and not isinstance(instance, bool))

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults}, type_checker=whole)


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
    where = list(error.absolute_path)
    if error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(error.instance, dict):
        yield from _unknown_key_messages(error, root)
    elif where and where[-1] == "api_key_env" and not is_env_name(error.instance):
        yield api_key_env_problem(_yaml_path(where), error.instance)
    else:
        message = error.message
        if error.context and error.validator in ("oneOf", "anyOf"):
            # The branch that got furthest says most about what was meant.
            import jsonschema

            message = jsonschema.exceptions.best_match(error.context).message
        # jsonschema repeats the value: a secret in it (or any value of a secret-named key) is masked.
        name = next((p for p in reversed(where) if isinstance(p, str)), "")
        yield masked_text(f"{_yaml_path(where)}: {message}", config_secrets(error.instance, name, by_name=True))


def _refuse(problems: list[str], config: Mapping[str, Any]) -> None:
    """Raise the one ConfigError listing ``problems``, with any secret of ``config`` masked."""
    if problems:
        text = "invalid workflow config:\n  " + "\n  ".join(problems)
        raise ConfigError(masked_text(text, config_secrets(config)))


def validate_config(config: Mapping[str, Any], schema_path: str | Path, *, check_references: bool = True) -> dict:
    """A deep copy of ``config`` with every schema default filled in; :class:`ConfigError` otherwise.

    All problems are reported at once, each on its own line and named by YAML path
    (``datasets.dl19.candidates.fromat: unknown key; did you mean 'format'?``), with any secret
    masked. ``check_references=False`` leaves the names that point elsewhere unchecked (for a
    config that is still to gain rows).
    """
    schema = load_yaml(schema_path)
    filled = copy.deepcopy(dict(config))
    validator = _defaults_validator()(schema)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(filled), key=lambda e: [str(p) for p in e.absolute_path]):
        problems += [m for m in _messages(error, schema) if m not in problems]
    _refuse(problems, config)
    _refuse(bound_problems(filled), config)
    if check_references:
        _check_references(filled, config)
    return filled


def _check_references(config: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """Names that point at other entries must exist (the schema cannot say so); ``given`` is the
    config before its defaults were filled."""
    models, datasets, teachers = config["models"], config["datasets"], config["teachers"]
    problems = []
    for name, v in config["variants"].items():
        if v.get("model") is not None and v["model"] not in models:
            problems.append(unknown_name(f"variants.{name}.model", v["model"], models, "a key of models"))
        student = v.get("student")
        if student:
            if student["teacher"] not in teachers:
                problems.append(unknown_name(f"variants.{name}.student.teacher", student["teacher"], teachers,
                                             "a key of teachers"))
            for role in ("train", "heldout"):
                ds = student[role]
                if ds not in datasets:
                    problems.append(unknown_name(f"variants.{name}.student.{role}", ds, datasets, "a key of datasets"))
                elif datasets[ds]["role"] != role:
                    problems.append(f"variants.{name}.student.{role}: dataset {ds!r} has role "
                                    f"{datasets[ds]['role']!r}, expected {role!r}")
    # Each variant against its scorer's capability record (built-in or plug-in).
    eval_tasks = sorted({d["task"] for d in datasets.values() if d["role"] == "eval"})
    for name, v in config["variants"].items():
        problems.extend(variant_problems(name, v, config["variants"], eval_tasks))
    for name, t in teachers.items():
        if t["kind"] == "open_weight" and t["model"] not in models:
            problems.append(unknown_name(f"teachers.{name}.model", t["model"], models, "a key of models"))
        if t["kind"] == "hosted" and t["provider"] == "openai" and "base_url" not in t and not t.get("skip"):
            problems.append(f"teachers.{name}: a hosted teacher needs base_url")
    problem = run_name_problem(config.get("name"))
    if problem:
        problems.append(problem)
    cache_dirs = config.get("read_cache") or {}
    for key in ("dir", "answers_dir"):
        where = cache_dirs.get(key)
        if where and Path(where).exists() and not Path(where).is_dir():
            problems.append(f"read_cache.{key}: {where} is a file; expected a folder for the cache "
                            f"(name a folder, or move the file away)")
    reader = config["reader"]
    if reader.get("model") is not None and reader["model"] not in models:
        problems.append(unknown_name("reader.model", reader["model"], models, "a key of models"))
    qa = [d for d, spec in datasets.items() if spec["task"] == "qa"]
    if qa and reader.get("model") is None:
        problems.append(f"reader.model: QA datasets {qa} need a frozen reader (a key of models)")
    problems.extend(verdict_reader_problems(config["verdict_reader"], reader, datasets, models))
    problems.extend(width_problems(config["width"], datasets))
    labels = {v.get("label", name) for name, v in config["variants"].items()}
    problems.extend(pool_problems(config["pool_perturbation"], datasets, labels))
    problems.extend(context_problems(config["context_decomposition"], datasets, config["variants"]))
    problems.extend(render_problems(config["render_perturbations"], datasets, config["variants"],
                                    config["protocol"]["rubric"]["rerank"]))
    problems.extend(cross_ref_problems(config, given))
    _refuse(problems, config)


FIRST_STAGE_VARIANT = "first_stage"
FIRST_STAGE_LABEL = "First stage (identity)"


def with_first_stage_row(config: Mapping[str, Any]) -> dict:
    """``config`` with the identity scorer's row first among its variants (``first_stage_row``)."""
    variants = dict(config.get("variants") or {})
    if FIRST_STAGE_VARIANT in variants:
        raise ConfigError(f"variants.{FIRST_STAGE_VARIANT}: the name first_stage_row gives the first-stage row is "
                          "taken by a variant that does not use the identity scorer; rename it, or set "
                          "first_stage_row: false")
    row = {FIRST_STAGE_VARIANT: {"label": FIRST_STAGE_LABEL, "scorer": "identity"}}
    return {**config, "variants": {**row, **variants}}


def load_workflow_config(config: Mapping[str, Any], schema_path: str | Path) -> tuple[dict, WorkflowConfig]:
    """Expand catalogue datasets, validate (filling defaults) and build the records: (filled plain dict, records)."""
    expanded = expand_aliases(expand_catalogue(config))
    # Names are checked once the first-stage row is in (a config may name it: figure1, contrasts).
    filled = validate_config(expanded, schema_path, check_references=False)
    if filled["first_stage_row"] and not any(v.get("scorer") == "identity" for v in filled["variants"].values()):
        expanded = with_first_stage_row(expanded)
        filled = validate_config(expanded, schema_path, check_references=False)
    _check_references(filled, expanded)
    _refuse(feasibility_problems(filled), filled)
    # The jobs read the base the config means: None where the schema's default names no variant.
    filled["contrasts"]["base"] = contrasts_base(filled, expanded)
    records = WorkflowConfig.from_validated(filled)
    check_path_kinds(records.datasets)  # a directory where a file is read (or the reverse) fails here, not in its job
    return filled, records


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
