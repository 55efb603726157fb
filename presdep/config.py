"""A typed view of the validated workflow config, shared by the rules and the CLI.

The config says WHAT to run (datasets, models, variants, protocol); profiles say
WHERE. Snakemake merges a ``--configfile`` recursively into the embedded default;
for ``datasets`` and ``variants`` that would ADD a user's entries to the default's,
so :func:`apply_replacing_sections` lets a user file's sections replace them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from presdep import __version__

# Sections that a --configfile replaces wholesale instead of merging into.
REPLACING_SECTIONS = ("datasets", "variants", "synthetic", "synthetic_tasks")
TASKS = ("rerank", "qa", "response")


def load_yaml(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
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
    config.update(replaced)
    return config


def block_size(config: Mapping[str, Any], dataset: str) -> int:
    """B for a dataset: its own ``B`` if set, else the protocol's B for its task."""
    ds = config["datasets"][dataset]
    if "B" in ds:
        return int(ds["B"])
    return int(config["protocol"]["B"][ds["task"]])


def protocol_for(config: Mapping[str, Any], dataset: str) -> dict:
    """The resolved protocol of one dataset (B resolved for its task)."""
    proto = copy.deepcopy(dict(config["protocol"]))
    proto["B"] = block_size(config, dataset)
    ds = config["datasets"][dataset]
    for key in ("M", "perturbations", "max_doc_chars"):
        if key in ds:
            proto[key] = ds[key]
    return proto


def variant_config(config: Mapping[str, Any], variant: str) -> dict:
    """A variant's settings with the model entry it names resolved inline."""
    v = copy.deepcopy(dict(config["variants"][variant]))
    model = v.get("model")
    if isinstance(model, str):
        if model not in config.get("models", {}):
            raise KeyError(f"variant {variant!r} names model {model!r}, which is not in config['models']")
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
        out[f"p{i}"] = copy.deepcopy(p)
    return out
