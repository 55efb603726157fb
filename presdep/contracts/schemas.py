"""Parquet contracts: one pyarrow schema per artifact, validated on write and on read.

Every file carries key-value metadata under the key ``presdep`` (JSON): the presdep
version, the artifact kind and the resolved parameters that produced it. Writes are
atomic (a temporary file in the same folder, then ``os.replace``: :mod:`presdep.contracts.atomic_files`),
so a killed job never leaves a half-written file behind.

Every file also carries two checksums, verified on read, so that no damaged byte is served:

* Parquet page checksums (CRC32 of every data page, ``write_page_checksum=True``), checked by
  the reader (``page_checksum_verification=True``);
* a content digest (SHA-256, see :mod:`presdep.contracts.artifact_digests`) under ``presdep_sha256`` over a
  canonical, layout-independent encoding of the table as :func:`read_table` returns it and of
  the ``presdep`` JSON bytes, plus ``presdep_meta_sha256`` over the JSON bytes alone, which is
  what :func:`read_metadata` checks (it reads only the footer, never the data pages).

A file without either digest (written by an older presdep, or by hand) is read with one
logged warning; a file with only one of them, or whose digest does not match, is refused
with a :class:`SchemaError` that says how to rebuild it. Two kinds of footer damage would
otherwise pass for such an older file, so they are refused too: a footer whose Thrift struct
ends before its stated length (the fields after the damage are silently dropped), and a file
whose key-value metadata is gone but whose first column still carries presdep's Parquet field
id (written with the digests, outside the key-value metadata, as a mark that they were there).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from presdep import __version__
from presdep.contracts.artifact_digests import (
    DIGEST_KEY,
    META_DIGEST_KEY,
    METADATA_KEY,
    artifact_metadata,
    content_digest,
    metadata_digest,
)
from presdep.contracts.atomic_files import (
    atomic_path,
    atomic_write,
    write_bytes_atomic,
    write_dir_atomic,
    write_text_atomic,
)
from presdep.contracts.errors import SchemaError

log = logging.getLogger(__name__)

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
    # The pool perturbation's reads (presdep.scoring.pool_run): one row per document per pool list.
    "pool_scores": pa.schema(
        [
            _field("query_id", _STR),
            _field("doc_id", _STR),
            _field("pool", _STR),  # canonical | replace | drop
            _field("position", _I32),  # 0-based in that list (first-stage order, never shuffled)
            _field("score", _F64),
            _field("drop_rank", _I32),
        ]
    ),
    # The context decomposition's reads (presdep.scoring.context_run): one row per pool document x arm x
    # presentation (A1 once, presentation -1).
    "context_scores": pa.schema(
        [
            _field("query_id", _STR),
            _field("doc_id", _STR),
            _field("arm", _STR),  # A1 | A2 | A3 | A4
            _field("presentation", _I32),  # -1 canonical, s >= 0 Random(s).shuffle
            _field("position", _I32),  # 0-based in the presented list (A1: in the pool)
            _field("slot", _I32),  # 0-based in its chunk
            _field("width", _I32),  # its chunk's size (A1: 1)
            _field("first_stage_rank", _I32),
            _field("score", _F64),
        ]
    ),
    # The verdict reader's judgements (presdep.scoring.verdict_reader): one row per claim x presentation.
    "verdicts": pa.schema(
        [
            _field("query_id", _STR),
            _field("perturbation", _STR),
            _field("presentation", _I32),
            _field("verdict", _STR),  # SUPPORTED | REFUTED | NEI | INVALID
            _field("raw_answer", _STR),
            _field("gold", _STR),
            _field("evidence_in_topk", _I32),  # judged relevant passages among the k read
            _field("evidence_slot", _I32, True),  # 0-based slot of the first; null when none was read
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
    # Why each decision flipped (presdep.metrics.flip_ledger, docs/methods/flip-ledger.md): one row per
    # flipped decision between presentations a < b; a cause's Boolean is null where it cannot be tested.
    "flip_ledger": pa.schema(
        [
            _field("decision", _STR),
            _field("query_id", _STR),
            _field("doc_id", _STR, True),
            _field("presentation_a", _I32),
            _field("presentation_b", _I32),
            _field("value_a", _STR),
            _field("value_b", _STR),
            _field("score_a", _F64, True),
            _field("score_b", _F64, True),
            _field("margin_a", _F64),
            _field("margin_b", _F64),
            _field("noise_floor", _F64, True),
            _field("fit_a", _F64, True),
            _field("fit_b", _F64, True),
            *(_field(cause, pa.bool_(), True) for cause in ("tie", "noise", "parse", "slot", "companions")),
            _field("cause", _STR),
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
    "verdicts": ("query_id", "perturbation", "presentation"),
    "pool_scores": ("query_id", "doc_id", "pool"),
    "context_scores": ("query_id", "doc_id", "arm", "presentation"),
    "metrics": ("dataset", "variant", "seed", "perturbation", "query_id", "metric"),
    "flip_ledger": ("decision", "query_id", "doc_id", "presentation_a", "presentation_b"),
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


# The Parquet field id write_table gives the first column: it lives in the Parquet schema,
# outside the key-value metadata, and marks a file written with digests (one damaged byte
# cannot remove both the mark and the key-value metadata).
FIELD_ID_KEY = b"PARQUET:field_id"
_FIELD_ID_BASE = 0x70640000  # "pd" in the high half: not an id another writer is likely to pick


def _mark_fields(table: pa.Table) -> pa.Table:
    """``table`` with presdep's field id on its first column (a zero-copy cast: only metadata changes)."""
    fields = list(table.schema)
    if fields:
        fields[0] = fields[0].with_metadata({FIELD_ID_KEY: str(_FIELD_ID_BASE).encode()})
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


def _has_marked_fields(schema: pa.Schema) -> bool:
    for f in schema:
        fid = (f.metadata or {}).get(FIELD_ID_KEY, b"")
        if fid.isdigit() and int(fid) >> 16 == _FIELD_ID_BASE >> 16:
            return True
    return False


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
    meta_json = json.dumps(meta, sort_keys=True, default=str).encode("utf-8")
    # The digest is over the table as read_table returns it: the contract-cast table via polars.
    table = table.replace_schema_metadata(artifact_metadata(pl.from_arrow(table), meta_json))  # type: ignore[arg-type]
    table = _mark_fields(table)
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))


# Exceptions a reader must never swallow: the user or the interpreter stopping the process.
_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)

# What works: --force redoes the file even when what depends on it looks up to date (a deleted
# intermediate file is not redone by a plain `snakemake`); a user's own file is never to be deleted.
REBUILD_HINT = ("if a workflow rule wrote it, re-run the rule that wrote it: `snakemake --cores all --force <this "
                "file>`, then ask for your target again (what depends on it is redone); if it is a file of your own, "
                "it is not one presdep wrote")


def _unreadable(path: Path, what: str, exc: BaseException) -> SchemaError:
    """The SchemaError for a file the reader choked on, naming the file, the contract and the fix."""
    detail = f"{type(exc).__name__}: {exc}".strip()
    if len(detail) > 500:
        detail = detail[:500] + "..."
    return SchemaError(f"{path}: not a readable Parquet file for the {what} contract ({detail}); {REBUILD_HINT}")


def _check_metadata_text(schema: pa.Schema, where: str) -> None:
    """Key-value metadata must be UTF-8 text (a flipped byte there makes polars panic)."""
    items = list((schema.metadata or {}).items())
    for f in schema:
        items += list((f.metadata or {}).items())
    for k, v in items:
        try:
            k.decode("utf-8")
            v.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{where}: key-value metadata {k[:40]!r} is not UTF-8 text ({exc})") from exc


_DAMAGED = "the file changed after presdep wrote it (disk or copy damage)"

# Files already warned about for lacking a digest (one warning per file and process).
_WARNED_UNVERIFIED: set[str] = set()


def _warn_unverified(path: Path) -> None:
    key = str(path)
    if key not in _WARNED_UNVERIFIED:
        _WARNED_UNVERIFIED.add(key)
        log.warning(
            "%s: no presdep content digest (written by an older presdep or by hand): read "
            "without verifying it; re-run the rule that wrote it to add one", path,
        )


def _stored_digests(md: Mapping[bytes, bytes], marked: bool, where: str) -> tuple[bytes, bytes] | None:
    """The (content, metadata) digests of a file; None for a file written without them.

    Both are written together, with the JSON and the field ids (``marked``): a file holding
    only some of these was damaged.
    """
    data, meta, raw = md.get(DIGEST_KEY), md.get(META_DIGEST_KEY), md.get(METADATA_KEY)
    if data is None and meta is None:
        if marked:
            raise SchemaError(
                f"{where}: its columns carry presdep's field id but its key-value metadata "
                f"(provenance and digests) is gone: {_DAMAGED}; {REBUILD_HINT}"
            )
        return None
    if data is None or meta is None or raw is None:
        lost = [k.decode() for k in (DIGEST_KEY, META_DIGEST_KEY, METADATA_KEY) if md.get(k) is None]
        raise SchemaError(f"{where}: key-value metadata {lost} missing: {_DAMAGED}; {REBUILD_HINT}")
    return data, meta


def _verify_metadata(md: Mapping[bytes, bytes], marked: bool, path: Path, where: str) -> bool:
    """Check the JSON against its digest; False (after one warning) for a file without digests."""
    stored = _stored_digests(md, marked, where)
    if stored is None:
        _warn_unverified(path)
        return False
    if metadata_digest(md[METADATA_KEY]).encode("ascii") != stored[1]:
        raise SchemaError(f"{where}: metadata digest mismatch: {_DAMAGED}; {REBUILD_HINT}")
    return True


def _footer_metadata(fh, where: str) -> tuple[Mapping[bytes, bytes], bool]:
    """The file's own key-value metadata (the Parquet footer's, not the Arrow schema's), and
    whether its columns carry presdep's field ids.

    Also checks that the footer parsed to its end: a damaged byte there can end the Thrift
    struct early, which silently drops the fields after it (the row groups' tail, the key-value
    metadata, digests included); no correct writer leaves bytes unparsed.
    """
    fmd = pq.read_metadata(fh)
    fh.seek(-8, os.SEEK_END)
    tail = fh.read(8)
    stated = int.from_bytes(tail[:4], "little")
    if fmd.serialized_size != stated:
        raise SchemaError(
            f"{where}: its Parquet footer ends after {fmd.serialized_size} of its {stated} bytes: "
            f"{_DAMAGED}; {REBUILD_HINT}"
        )
    return fmd.metadata or {}, _has_marked_fields(fmd.schema.to_arrow_schema())


@contextmanager
def _read_errors(path: Path, what: str) -> Iterator[None]:
    """The one place a read failure becomes the project's error: a SchemaError naming the file
    and how to rebuild it; a missing file stays FileNotFoundError, interrupts pass through."""
    try:
        yield
    except FileNotFoundError:
        raise
    except _PASS_THROUGH:
        raise
    except SchemaError as exc:
        if REBUILD_HINT in str(exc):
            raise
        raise SchemaError(f"{exc}; {REBUILD_HINT}") from exc
    except BaseException as exc:  # pyarrow raises many types; a polars panic is a BaseException
        raise _unreadable(path, what, exc) from exc


def read_table(path: str | os.PathLike, kind: str) -> pl.DataFrame:
    """Read a Parquet artifact and validate it against the ``kind`` contract.

    A missing file raises FileNotFoundError; any other failure of the reader (pyarrow's errors,
    a Rust panic from polars, which is a BaseException, a file whose buffers do not validate)
    raises :class:`SchemaError` naming the file and the contract. KeyboardInterrupt, SystemExit
    and GeneratorExit pass through unchanged.

    Page checksums are verified as the pages are read; then the content digest is recomputed
    over the table returned and the ``presdep`` JSON and compared with the stored one (a
    mismatch is a SchemaError). A file without digests is read with one logged warning.
    """
    path = Path(path)
    where = f"{path}: {kind!r} table"
    with _read_errors(path, repr(kind)):
        # One open: the footer and the pages come from the same file. Arrow's own file, not a Python
        # one: Arrow's reader threads would call back into Python through it, and such a thread
        # still alive at interpreter exit aborts the process ("terminate called without an
        # active exception", apache/arrow#34314).
        with pa.OSFile(str(path), "rb") as fh:
            md, marked = _footer_metadata(fh, where)
            table = pq.read_table(fh, page_checksum_verification=True)
        # Full validation (offsets, UTF-8) before polars sees the buffers: a corrupt page that
        # decodes to invalid strings must fail here, not as a panic or worse inside polars.
        table.validate(full=True)
        _check_metadata_text(table.schema, f"{path}: {kind!r} table")
        # polars needs no key-value metadata (and panics on any that is not UTF-8).
        df = pl.from_arrow(table.replace_schema_metadata(None))
        if not isinstance(df, pl.DataFrame):
            raise SchemaError(f"{path}: {kind!r} table: expected a table, read a {type(df).__name__}")
        checked = _check(df, kind, str(path))
        out = pl.from_arrow(checked)
        verified = _verify_metadata(md, marked, path, where)
        if verified and content_digest(out, md[METADATA_KEY]).encode("ascii") != md[DIGEST_KEY]:  # type: ignore[arg-type]
            raise SchemaError(f"{where}: content digest mismatch: {_DAMAGED}; {REBUILD_HINT}")
    return out  # type: ignore[return-value]


def read_metadata(path: str | os.PathLike) -> dict:
    """The ``presdep`` provenance metadata of a Parquet artifact ({} if absent).

    Errors as :func:`read_table`: FileNotFoundError for a missing file, SchemaError for any other.
    Reads only the footer: the JSON is verified against its own digest (``presdep_meta_sha256``),
    not the data against the content digest, which is :func:`read_table`'s job. A file without
    digests is read with one logged warning.
    """
    path = Path(path)
    with _read_errors(path, "presdep artifact metadata"):
        where = f"{path}: presdep artifact metadata"
        with pa.OSFile(str(path), "rb") as fh:  # as in read_table
            md, marked = _footer_metadata(fh, where)
        _verify_metadata(md, marked, path, where)
        raw = md.get(METADATA_KEY)
        meta = json.loads(raw) if raw else {}
        if not isinstance(meta, dict):
            raise SchemaError(f"{path}: its {METADATA_KEY.decode()} metadata is not a JSON object")
    return meta


__all__ = [
    "DIGEST_KEY", "FIELD_ID_KEY", "KEYS", "METADATA_KEY", "META_DIGEST_KEY", "REBUILD_HINT", "SCHEMAS",
    "artifact_metadata", "atomic_path", "atomic_write", "content_digest", "metadata_digest", "provenance",
    "read_metadata", "read_table", "write_bytes_atomic", "write_dir_atomic", "write_table", "write_text_atomic",
]
