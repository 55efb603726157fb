"""The lambda-selection artifact (``selected.json``) as scoring reads it."""

from __future__ import annotations

import os

from presdep.contracts.errors import SchemaError, cut
from presdep.contracts.json_artifacts import read_json_artifact
from presdep.contracts.schemas import REBUILD_HINT


def adapter_for(selected_json: str | os.PathLike, seed: int) -> str:
    """The adapter directory the selection names for a training seed (the file is verified
    against its digest: a damaged or edited selection is a SchemaError naming it)."""
    rec = read_json_artifact(selected_json, "lambda selection")
    adapters = rec.get("adapters")
    if not isinstance(adapters, dict) or not all(isinstance(v, str) for v in adapters.values()):
        raise SchemaError(f"{selected_json}: lambda selection: 'adapters' must map training seeds to adapter "
                          f"folders, got {cut(adapters)}; {REBUILD_HINT}")
    try:
        return adapters[str(int(seed))]
    except KeyError:
        raise KeyError(f"{selected_json}: no adapter for seed {seed}; have {sorted(adapters)}") from None
