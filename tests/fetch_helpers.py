"""Shared by the fetch tests: the real datasets under ../shared/data and fetching one through
its catalogue entry from a local copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from presdep.data.fetch.run import fetch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def requires_file(path: Path, what: str) -> pytest.MarkDecorator:
    """Skip a test when ``path`` (real data, not in the repository) is absent."""
    return pytest.mark.skipif(not path.is_file(), reason=f"{what} (../shared/data) not available")


def fetch_catalogue_entry(name: str, path: Path, out: Path, *, layout: str):
    """Fetch dataset ``name`` through its catalogue entry, reading the source from ``path``."""
    from presdep.config.catalogue import load_catalogue

    entry = load_catalogue()["datasets"][name]
    return fetch(name, entry, out, layout=layout, local={"path": str(path)})
