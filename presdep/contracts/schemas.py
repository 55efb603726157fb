"""Parquet contracts: one pyarrow schema per artifact, validated on write and on read.

Every file carries key-value metadata under the key ``presdep`` (JSON): the presdep
version, the artifact kind and the resolved parameters that produced it. Writes are
atomic (a temporary file in the same folder, then ``os.replace``), so a killed job
never leaves a half-written file behind.

Every file also carries two checksums, verified on read, so that no damaged byte is served:

* Parquet page checksums (CRC32 of every data page, ``write_page_checksum=True``), checked by
  the reader (``page_checksum_verification=True``);
* a content digest (SHA-256, see :func:`content_digest`) under ``presdep_sha256`` over a
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

import hashlib
import json
import logging
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from presdep import __version__
from presdep.contracts.errors import SchemaError

log = logging.getLogger(__name__)

METADATA_KEY = b"presdep"
# SHA-256 (hex) of the canonical encoding of the data and the METADATA_KEY JSON bytes.
DIGEST_KEY = b"presdep_sha256"
# SHA-256 (hex) of the METADATA_KEY JSON bytes alone: what read_metadata verifies.
META_DIGEST_KEY = b"presdep_meta_sha256"

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

    A crash at any point leaves either the old file or the new one, never a torn one. A full
    filesystem (ENOSPC, EDQUOT, or a writer's own words for it, see
    :meth:`~presdep.contracts.errors.DiskFullError.from_failure`) raises
    :class:`~presdep.contracts.errors.DiskFullError` naming ``path`` and the space left; the
    temporary file is removed either way.
    """
    path = Path(path)
    tmp = None
    try:
        tmp = atomic_path(path)
        writer(tmp)
        os.replace(tmp, path)
    except Exception as exc:
        from presdep.contracts.errors import DiskFullError

        full = DiskFullError.from_failure(path, exc)  # before the partial file goes: it holds the space
        if full is None or full is exc:
            raise
        raise full from exc
    finally:
        if tmp is not None and tmp.exists():
            tmp.unlink()
    return path


def write_dir_atomic(final: str | os.PathLike, write) -> Path:
    """Fill a temporary sibling folder with ``write(tmp)``, then rename it onto ``final``.

    For writers that produce folders (``save_pretrained``, a hub snapshot, a checkpoint). A
    crash leaves the old folder or the new one; an old one is replaced only once the new
    one is complete. Files get the mode an ordinary open() would give (writers such as
    safetensors create them through mkstemp, 0600). A full filesystem raises
    :class:`~presdep.contracts.errors.DiskFullError` naming ``final``, as in
    :func:`atomic_write`; the temporary folder is removed either way.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        tmp.chmod(0o777 & ~_UMASK)
        write(tmp)
        for path in tmp.rglob("*"):
            if path.is_file() and not path.is_symlink():
                path.chmod(0o666 & ~_UMASK)
            elif path.is_dir():
                path.chmod(0o777 & ~_UMASK)
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
            os.replace(final, old / "x")
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except Exception as exc:
        from presdep.contracts.errors import DiskFullError

        full = DiskFullError.from_failure(final, exc)
        if full is None or full is exc:
            raise
        raise full from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


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


# Versioned prefixes of the hashed encodings: a change of encoding must change the tag.
_TABLE_DIGEST_TAG = b"presdep-table-digest/1\n"
_META_DIGEST_TAG = b"presdep-meta-digest/1\n"


def _frame(h, data) -> None:
    """Feed ``data`` (bytes or a contiguous buffer) to ``h`` behind its length: no two inputs collide."""
    view = memoryview(data).cast("B")
    h.update(struct.pack("<Q", view.nbytes))
    h.update(view)


def _le(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous little-endian copy (or view) of ``arr``: the hashed bytes do not depend on the host."""
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr)


def _series_parts(s: pl.Series) -> Iterator[bytes | np.ndarray]:
    """The canonical encoding of one column: a type tag, then its buffers (framed by the caller).

    Depends only on the values and their nulls, never on chunks, row groups or Arrow buffer
    layout. String columns: null mask, UTF-8 byte lengths, concatenated bytes. Numeric and
    boolean columns: null mask, values with nulls filled (numpy dtype kept, little-endian).
    Categoricals are encoded as their strings, temporal types as their physical integers; any
    other type (lists, structs, binary, decimals, ...) as ``repr`` of its Python values, slower
    but exact. The tags of the contracts' types (``utf8``, ``numpy:<i4`` ...) depend on no
    library's naming; those of the others include polars' repr of the dtype.
    """
    dt = s.dtype
    if dt in (pl.Categorical, pl.Enum):
        s = s.cast(pl.String)
        yield b"categorical"
        dt = pl.String
    if dt == pl.String:
        yield b"utf8"
        yield _le(s.is_null().to_numpy())
        filled = s.fill_null("")
        yield _le(filled.str.len_bytes().to_numpy())
        joined = filled.str.join("").cast(pl.Binary).item() if s.len() else b""
        yield joined or b""
        return
    if dt.is_temporal():
        yield f"temporal:{dt!r}".encode()
        s = s.to_physical()
        dt = s.dtype
    if (dt.is_numeric() and not dt.is_decimal()) or dt == pl.Boolean:
        values = s.fill_null(False if dt == pl.Boolean else 0).to_numpy()
        yield f"numpy:{values.dtype.str}".encode()
        yield _le(s.is_null().to_numpy())
        yield _le(values)
        return
    yield f"pylist:{dt!r}".encode()
    yield repr(s.to_list()).encode("utf-8")


def content_digest(df: pl.DataFrame, meta_json: bytes) -> str:
    """SHA-256 (hex) of a canonical, layout-independent encoding of ``df`` and ``meta_json``.

    Per column, in column order: the name, a type tag and the column's buffers (see
    :func:`_series_parts`), every piece length-prefixed; before them the ``presdep`` JSON bytes,
    the row count and the column count. The same values give the same digest whatever the
    row-group size, the chunking or the Parquet encoding they were read from.
    """
    h = hashlib.sha256(_TABLE_DIGEST_TAG)
    _frame(h, meta_json)
    h.update(struct.pack("<QQ", df.height, df.width))
    for s in df.get_columns():
        _frame(h, s.name.encode("utf-8"))
        for part in _series_parts(s):
            _frame(h, part)
    return h.hexdigest()


def metadata_digest(meta_json: bytes) -> str:
    """SHA-256 (hex) of the ``presdep`` JSON bytes alone (what :func:`read_metadata` verifies)."""
    return hashlib.sha256(_META_DIGEST_TAG + meta_json).hexdigest()


def artifact_metadata(df: pl.DataFrame, meta_json: bytes) -> dict[bytes, bytes]:
    """The schema metadata presdep writes for ``df``: the JSON and both of its digests.

    ``df`` must be the table as :func:`read_table` will return it (the contract's columns, in
    order, with the contract's types).
    """
    return {
        METADATA_KEY: meta_json,
        DIGEST_KEY: content_digest(df, meta_json).encode("ascii"),
        META_DIGEST_KEY: metadata_digest(meta_json).encode("ascii"),
    }


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

REBUILD_HINT = "delete it and re-run the rule that wrote it: snakemake will redo it"


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
        with open(path, "rb") as fh:  # one open: the footer and the pages come from the same file
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
        with open(path, "rb") as fh:
            md, marked = _footer_metadata(fh, where)
        _verify_metadata(md, marked, path, where)
        raw = md.get(METADATA_KEY)
        meta = json.loads(raw) if raw else {}
        if not isinstance(meta, dict):
            raise SchemaError(f"{path}: its {METADATA_KEY.decode()} metadata is not a JSON object")
    return meta


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write a text file atomically (tables, reports, yaml)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))
