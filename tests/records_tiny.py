"""Records for tests that call the library directly, built the way a library caller builds them."""

from __future__ import annotations

from typing import Any, Mapping

from presdep.config.records import Dataset, Protocol


def fixture_dataset(name: str, spec: Mapping[str, Any], *, seed: int) -> Dataset:
    """An eval dataset entry with the protocol a fixture reads (its seed picks the max_queries sample)."""
    protocol = Protocol.checked({"seed": seed, "M": 1, "B": 20, "max_doc_chars": 1200, "perturbations": []})
    return Dataset.checked(name, {"role": "eval", **spec}, protocol)
