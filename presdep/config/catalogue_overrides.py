"""A config's ``catalogue_overrides``: where a catalogue source lives, and how large its samples are.

A mirror (an institution's copy of the hub, a release file on a local server) or the rehearsal
(configs/rehearsal.yaml, every source on loopback) changes a source's location and pins, never
what the source is: the converter, the first stage, the instruction and the rubric stay the
catalogue's. So only the keys below may be overridden; the fetch manifest records the result.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from presdep.config.run_names import similar_names
from presdep.contracts.errors import ConfigError

# section -> the keys a config may change in it (the schema's catalogue_overrides block says the same).
OVERRIDABLE = {
    "source": ("url", "sha256", "revision", "prebuilt_index"),
    "sampling": ("n", "heldout", "dev"),
    "selection": ("questions",),
    "verdict_labels": ("revision",),  # the claims' verdicts: the hub commit, as for an hf_datasets source
}


def with_overrides(catalogue: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict:
    """A copy of ``catalogue`` with each override merged into its entry (section by section)."""
    out = copy.deepcopy(dict(catalogue))
    problems = []
    for cid, change in (overrides or {}).items():
        section = "datasets" if cid in out["datasets"] else "training_pools" if cid in out["training_pools"] else None
        if section is None:
            ids = sorted([*out["datasets"], *out["training_pools"]])
            hint = similar_names(str(cid), ids).strip()
            problems.append(f"catalogue_overrides.{cid}: not a catalogue id ({', '.join(ids)})"
                            f"{'; ' + hint if hint else ''}")
            continue
        if not isinstance(change, Mapping):
            problems.append(f"catalogue_overrides.{cid}: expected a mapping of {sorted(OVERRIDABLE)}")
            continue
        entry = out[section][cid]
        for part, values in change.items():
            allowed = OVERRIDABLE.get(part)
            if allowed is None or not isinstance(values, Mapping):
                problems.append(f"catalogue_overrides.{cid}.{part}: only {sorted(OVERRIDABLE)} (mappings) may change")
                continue
            unknown = sorted(set(values) - set(allowed))
            if unknown:
                problems.append(f"catalogue_overrides.{cid}.{part}: {unknown} cannot change; only {list(allowed)}")
                continue
            if part != "source" and not isinstance(entry.get(part), Mapping):
                problems.append(f"catalogue_overrides.{cid}.{part}: the catalogue entry has no {part} to override")
                continue
            entry[part] = {**(entry.get(part) or {}), **copy.deepcopy(dict(values))}
    if problems:
        raise ConfigError("invalid workflow config:\n  " + "\n  ".join(problems))
    return out
