"""Content digests of Parquet artifacts: SHA-256 over a canonical, layout-independent encoding.

What :mod:`presdep.contracts.schemas` stores in every file it writes and checks on every
read: :func:`content_digest` over the table as :func:`~presdep.contracts.schemas.read_table`
returns it and the ``presdep`` JSON bytes (key ``presdep_sha256``), and
:func:`metadata_digest` over the JSON bytes alone (key ``presdep_meta_sha256``, what
:func:`~presdep.contracts.schemas.read_metadata` checks). The encoding depends only on the
values and their nulls, never on chunks, row groups or the Parquet encoding read from.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator

import numpy as np
import polars as pl

METADATA_KEY = b"presdep"
# SHA-256 (hex) of the canonical encoding of the data and the METADATA_KEY JSON bytes.
DIGEST_KEY = b"presdep_sha256"
# SHA-256 (hex) of the METADATA_KEY JSON bytes alone: what read_metadata verifies.
META_DIGEST_KEY = b"presdep_meta_sha256"


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
    """SHA-256 (hex) of the ``presdep`` JSON bytes alone (what
    :func:`~presdep.contracts.schemas.read_metadata` verifies)."""
    return hashlib.sha256(_META_DIGEST_TAG + meta_json).hexdigest()


def artifact_metadata(df: pl.DataFrame, meta_json: bytes) -> dict[bytes, bytes]:
    """The schema metadata presdep writes for ``df``: the JSON and both of its digests.

    ``df`` must be the table as :func:`~presdep.contracts.schemas.read_table` will return it (the
    contract's columns, in order, with the contract's types).
    """
    return {
        METADATA_KEY: meta_json,
        DIGEST_KEY: content_digest(df, meta_json).encode("ascii"),
        META_DIGEST_KEY: metadata_digest(meta_json).encode("ascii"),
    }


__all__ = ["DIGEST_KEY", "METADATA_KEY", "META_DIGEST_KEY", "artifact_metadata", "content_digest", "metadata_digest"]
