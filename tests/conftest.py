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
