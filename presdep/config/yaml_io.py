"""YAML files of the project, read one way: a mapping at the top level or a clear error."""

from __future__ import annotations

from pathlib import Path

import yaml

from presdep.contracts.errors import ConfigError


def load_yaml(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data
