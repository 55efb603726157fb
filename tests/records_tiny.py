"""Records for tests that call the library directly, built the way a library caller builds them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from presdep.config.records import Dataset, Protocol


def fixture_dataset(name: str, spec: Mapping[str, Any], *, seed: int,
                    shuffle_queries: Mapping[str, Any] | None = None) -> Dataset:
    """An eval dataset entry with the protocol a fixture reads (its seed picks the max_queries sample;
    ``shuffle_queries``, a dataset's shuffle list, is recorded in the fixture's metadata)."""
    protocol = Protocol.checked({"seed": seed, "M": 1, "B": 20, "max_doc_chars": 1200, "perturbations": [],
                                 "shuffle_queries": shuffle_queries})
    return Dataset.checked(name, {"role": "eval", **spec}, protocol)
