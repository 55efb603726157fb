"""A small scores artifact for the storage-integrity tests (damage sweeps, digests)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from presdep.contracts.schemas import write_table


def scores_table(n: int = 24) -> pl.DataFrame:
    """n rows of the scores contract with nulls, repeats and varied values in every column kind."""
    i32, f32 = pl.Int32, pl.Float32
    return pl.DataFrame(
        {
            "query_id": [f"q{i // 4}" for i in range(n)],
            "doc_id": [f"d{i}" for i in range(n)],
            "perturbation": ["none" if i % 3 else "shuffle" for i in range(n)],
            "presentation": [i % 4 for i in range(n)],
            "position": [i % 3 for i in range(n)],
            "prompt": [0] * n,
            "slot": [i % 2 for i in range(n)],
            "score": [0.1 * i for i in range(n)],
            "p0": [0.25] * n,
            "p1": [None if i % 5 == 0 else 0.5 for i in range(n)],
            "p2": [0.125 * (i % 7) for i in range(n)],
            "p3": [0.0625] * n,
        },
        schema_overrides={"presentation": i32, "position": i32, "prompt": i32, "slot": i32,
                          "p0": f32, "p1": f32, "p2": f32, "p3": f32},
    )


def write_scores_sample(path: Path) -> Path:
    write_table(scores_table(), path, "scores", {"model": "tiny"})
    return path
