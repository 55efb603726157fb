"""The closed config schema as the one home of its enums: records and checks read them from it."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from presdep.config.yaml_io import load_yaml

# The schema ships with the package: the workflow, the CLI and the benchmark read the same file.
SCHEMA_PATH = Path(__file__).with_name("schema.yaml")


@lru_cache(maxsize=1)
def _schema() -> dict:
    return load_yaml(SCHEMA_PATH)


def entry_enum(section: str, key: str) -> tuple[Any, ...]:
    """The allowed values of ``key`` in one entry of a top-level mapping section (``variants``, ...)."""
    prop = _schema()["properties"][section]["additionalProperties"]["properties"][key]
    return tuple(prop.get("items", prop)["enum"])


def defs_enum(name: str, key: str = "format") -> tuple[Any, ...]:
    """The allowed values of ``key`` in the schema's ``$defs/<name>`` (e.g. the corpus source formats)."""
    return tuple(_schema()["$defs"][name]["properties"][key]["enum"])
