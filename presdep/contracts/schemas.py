"""Parquet contracts: one pyarrow schema per artifact, validated on write and on read.

Every file carries key-value metadata under the key ``presdep`` (JSON): the presdep
version, the artifact kind and the resolved parameters that produced it. Writes are
atomic (a temporary file in the same folder, then ``os.replace``), so a killed job
never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from presdep import __version__
from presdep.contracts.errors import SchemaError

METADATA_KEY = b"presdep"

_STR = pa.string()
_I32 = pa.int32()
_F64 = pa.float64()
_F32 = pa.float32()


def _field(name: str, dtype: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, dtype, nullable=nullable)


SCHEMAS: dict[str, pa.Schema] = {
    "candidates": pa.schema(
        [
            _field("query_id", _STR),
            _field("query", _STR),
            _field("doc_id", _STR),
            _field("doc", _STR),
            _field("first_stage_rank", _I32),
            _field("first_stage_score", _F64),
        ]
    ),
    "qrels": pa.schema(
        [_field("query_id", _STR), _field("doc_id", _STR), _field("relevance", _I32)]
    ),
    "first_stage": pa.schema(
        [_field("query_id", _STR), _field("doc_id", _STR), _field("rank", _I32), _field("score", _F64)]
    ),
    "answers_gold": pa.schema(
        [_field("query_id", _STR), _field("answer", _STR)]
    ),
    "scores": pa.schema(
        [
            _field("query_id", _STR),
            _field("doc_id", _STR),
            _field("perturbation", _STR),
            _field("presentation", _I32),
            _field("position", _I32),
            _field("prompt", _I32),
            _field("slot", _I32),
            _field("score", _F64),
            _field("p0", _F32, True),
            _field("p1", _F32, True),
            _field("p2", _F32, True),
            _field("p3", _F32, True),
        ]
    ),
    "silver": pa.schema(
        [
            _field("query_id", _STR),
            _field("doc_id", _STR),
            _field("teacher", _STR),
            _field("presentation", _I32),
            _field("score", _F64, True),
            _field("label_k1", _F64, True),
            _field("label", _F64, True),
        ]
    ),
    "answers": pa.schema(
        [
            _field("query_id", _STR),
            _field("perturbation", _STR),
            _field("presentation", _I32),
            _field("answer", _STR),
            _field("raw_answer", _STR),  # the generated text before clean_answer
        ]
    ),
    "metrics": pa.schema(
        [
            _field("dataset", _STR),
            _field("task", _STR),
            _field("variant", _STR),
            _field("seed", _I32, True),
            _field("perturbation", _STR),
            _field("query_id", _STR, True),
            _field("metric", _STR),
            _field("value", _F64, True),
        ]
    ),
}

# Columns that identify a row: duplicates there are a contract violation.
KEYS: dict[str, tuple[str, ...]] = {
    "candidates": ("query_id", "doc_id"),
    "qrels": ("query_id", "doc_id"),
    "first_stage": ("query_id", "doc_id"),
    "scores": ("query_id", "doc_id", "perturbation", "presentation"),
    "silver": ("query_id", "doc_id", "teacher", "presentation"),
    "answers": ("query_id", "perturbation", "presentation"),
    "metrics": ("dataset", "variant", "seed", "perturbation", "query_id", "metric"),
}




def _check(df: pl.DataFrame, kind: str, where: str) -> pa.Table:
    if kind not in SCHEMAS:
        raise SchemaError(f"{where}: unknown artifact kind {kind!r}; known: {sorted(SCHEMAS)}")
    schema = SCHEMAS[kind]
    missing = [f.name for f in schema if f.name not in df.columns]
    if missing:
        raise SchemaError(
            f"{where}: {kind} table lacks column(s) {missing}; expected {schema.names}"
        )
    df = df.select(schema.names)
    for f in schema:
        if not f.nullable and df[f.name].null_count():
            row = int(df[f.name].is_null().arg_max())
            raise SchemaError(f"{where}: column {f.name!r} of {kind} has a null at row {row}")
    table = df.to_arrow()
    try:
        table = table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        for f in schema:
            try:
                table.column(f.name).cast(f.type)
            except Exception:  # noqa: BLE001 - we re-raise with the column named
                got = table.schema.field(f.name).type
                raise SchemaError(
                    f"{where}: column {f.name!r} of {kind} has type {got}, expected {f.type}"
                ) from exc
        raise SchemaError(f"{where}: {kind} table does not match its schema: {exc}") from exc
    keys = KEYS.get(kind)
    if keys and df.height:
        dup = df.select(keys).is_duplicated()
        if dup.any():
            row = int(dup.arg_max())
            ident = {k: df[k][row] for k in keys}
            raise SchemaError(f"{where}: duplicate {kind} key {ident} (row {row})")
    return table


def provenance(kind: str, params: Mapping[str, Any] | None = None, **extra: Any) -> dict:
    """The metadata stored with every artifact."""
    meta = {"presdep_version": __version__, "kind": kind, "params": dict(params or {})}
    meta.update(extra)
    return meta


# The process umask, read once at import (reading it means setting it, which is not thread-safe).
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_path(path: Path):
    """A temporary sibling of ``path``; the caller renames it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates mode 0600; results are shared files, so give them the mode an
    # ordinary open() would (0666 less the umask), which the rename keeps.
    os.fchmod(fd, 0o666 & ~_UMASK)
    os.close(fd)
    return Path(tmp)


def atomic_write(path: str | os.PathLike, writer) -> Path:
    """Call ``writer(tmp_path)`` on a temporary sibling, then rename it onto ``path``.

    A crash at any point leaves either the old file or the new one, never a torn one.
    """
    path = Path(path)
    tmp = atomic_path(path)
    try:
        writer(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_table(
    df: pl.DataFrame,
    path: str | os.PathLike,
    kind: str,
    params: Mapping[str, Any] | None = None,
    **extra_meta: Any,
) -> Path:
    """Validate ``df`` against the ``kind`` contract and write it atomically."""
    path = Path(path)
    table = _check(df, kind, str(path))
    meta = provenance(kind, params, **extra_meta)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta, sort_keys=True, default=str)})
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def read_table(path: str | os.PathLike, kind: str) -> pl.DataFrame:
    """Read a Parquet artifact and validate it against the ``kind`` contract."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for bad files
        raise SchemaError(f"{path}: not a readable Parquet file ({exc})") from exc
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    checked = _check(df, kind, str(path))
    return pl.from_arrow(checked)  # type: ignore[return-value]


def read_metadata(path: str | os.PathLike) -> dict:
    """The ``presdep`` provenance metadata of a Parquet artifact ({} if absent)."""
    md = pq.read_schema(path).metadata or {}
    raw = md.get(METADATA_KEY)
    return json.loads(raw) if raw else {}


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write a text file atomically (tables, reports, yaml)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))
