"""Dataset aliases: one dataset of a config under other settings (``alias_of``), not a copy.

``datasets: {dl19_b1: {alias_of: dl19, B: 1, M: 1}}`` takes dl19's whole entry (after the catalogue
expansion: the same candidates, qrels, instruction and rubric) with the alias's own keys replacing
those they name. The fixed-weight width program scores the same weights at B = 1 this way
(docs/methods/width.md). An alias of an alias, or of a dataset the config does not have, is an
error naming the key.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from presdep.config.cross_refs import unknown_name
from presdep.contracts.errors import ConfigError


def expand_aliases(config: Mapping[str, Any]) -> dict:
    """A copy of ``config`` whose alias entries hold their dataset's entry under their own keys."""
    config = dict(config)
    datasets = config.get("datasets")
    if not isinstance(datasets, Mapping):
        return config
    problems, out = [], {}
    for name, spec in datasets.items():
        target = spec.get("alias_of") if isinstance(spec, Mapping) else None
        if target is None:
            out[name] = spec
            continue
        source = datasets.get(target)
        if not isinstance(source, Mapping):
            problems.append(unknown_name(f"datasets.{name}.alias_of", target, datasets, "a dataset of this config"))
        elif "alias_of" in source:
            problems.append(f"datasets.{name}.alias_of: {target!r} is itself an alias (of {source['alias_of']!r}); "
                            "name the dataset it stands for")
        else:
            out[name] = {**copy.deepcopy(dict(source)), **copy.deepcopy(dict(spec))}
    if problems:
        raise ConfigError("invalid workflow config:\n  " + "\n  ".join(problems))
    config["datasets"] = out
    return config


__all__ = ["expand_aliases"]
