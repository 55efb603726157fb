"""The lambda-selection artifact (``selected.json``) as scoring reads it."""

from __future__ import annotations

import json
import os
from pathlib import Path


def adapter_for(selected_json: str | os.PathLike, seed: int) -> str:
    """The adapter directory the selection names for a training seed."""
    rec = json.loads(Path(selected_json).read_text())
    try:
        return rec["adapters"][str(int(seed))]
    except KeyError:
        raise KeyError(f"{selected_json}: no adapter for seed {seed}; have {sorted(rec['adapters'])}") from None
