"""A content-addressed cache of model reads: each prompt's grade probabilities, read once.

An entry is one prompt's P(grade) per slot (float64, [slots, 4]; a render perturbation's scale
reads its own grade count), keyed by the exact token ids and read positions (and those grade
tokens); entries live in a folder per *identity*: the model (its
pinned source or the hash of its weights), the adapter's hash, the template's hash, the
dtype, the device type, the grade token ids and the torch / transformers versions. A
prompt that another variant, an earlier run or a killed job has read is never read again,
and a hit returns the stored float64 values, so scores built from it are bit-identical.

Storage (:mod:`presdep.runtime.content_cache`): ``<root>/<identity key>/identity.json`` and
Parquet shards (``key``, ``slots``, ``probs``, ``sha256``), each renamed into place whole.
An entry's checksum covers the identity, its key, its shape and its float64 little-endian
bytes, so a shard copied in from another identity's folder (a student's reads under off the
shelf's) is refused; a value read back is also refused unless it is a probability
distribution per slot (see :meth:`ReadCache._validate`). A refused shard is quarantined,
and its entries are read again by the scorer.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from presdep.contracts.errors import InvalidInput
from presdep.runtime.content_cache import ContentCache, shard_schema

log = logging.getLogger(__name__)

# Bump when the meaning or layout of a stored read changes (it is part of every identity).
# 2: a per-entry sha256 column and Parquet page checksums. 3: the identity in every
# entry's checksum and in each shard's metadata. 4: grade logits from the head's grade rows
# in float32 (presdep.scoring.readout.grade_head_logits), no longer in the model's dtype.
# Older shards live under other identity folders (the version is part of the identity key)
# and are no longer read: a cold cache.
FORMAT_VERSION = 4
SHARD_SCHEMA = shard_schema(("slots", pa.int32()), ("probs", pa.list_(pa.float64())))
# How far a slot's probabilities may sum from 1: the readout is a float64 softmax over four
# logits (presdep.scoring.readout.grade_probs), whose sums are off by a few ulp (~1e-16).
SUM_TOLERANCE = 1e-6


def probability_problem(arr: np.ndarray) -> str | None:
    """Why ``arr`` ([slots, 4] float64) is not one probability distribution per slot, or None."""
    if not np.isfinite(arr).all():
        return "probabilities not finite"
    if arr.size and (arr.min() < 0.0 or arr.max() > 1.0):
        return "probabilities outside [0, 1]"
    off = np.abs(arr.sum(axis=1) - 1.0)
    if off.size and off.max() > SUM_TOLERANCE:
        worst = float(arr.sum(axis=1)[np.argmax(off)])
        return f"a slot's probabilities sum to {worst!r}, not 1 (tolerance {SUM_TOLERANCE})"
    return None


def entry_key(ids: Sequence[int], read_positions: Sequence[int], grade_ids: Sequence[int] | None = None) -> str:
    """The key of one prompt: sha256 over its token ids and read positions (int64, little-endian),
    and the grade tokens read where a render's scale reads others than the identity's."""
    h = hashlib.sha256()
    h.update(np.asarray(ids, dtype="<i8").tobytes())
    h.update(b"|")
    h.update(np.asarray(read_positions, dtype="<i8").tobytes())
    if grade_ids is not None:
        h.update(b"|grades|")
        h.update(np.asarray(grade_ids, dtype="<i8").tobytes())
    return h.hexdigest()


class ReadCache(ContentCache):
    """Grade probabilities per prompt (float64 [slots, 4]) of one scoring identity under ``root``."""

    SCHEMA = SHARD_SCHEMA
    FORMAT_VERSION = FORMAT_VERSION
    KIND = "read cache"

    def _check(self, probs: Any) -> np.ndarray:
        arr = np.asarray(probs, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] < 2:
            raise InvalidInput(f"read cache: an entry is [slots, grades] grade probabilities (4 grades, or a render "
                               f"scale's), got shape {arr.shape}")
        problem = probability_problem(arr)
        if problem is not None:
            raise InvalidInput(f"read cache: an entry is one probability distribution per slot; {problem}")
        return arr.copy()

    def _copy(self, value: np.ndarray) -> np.ndarray:
        return value.copy()

    def _validate(self, value: np.ndarray) -> str | None:
        """Refuses values that are not a float64 softmax: any probability not finite or
        outside [0, 1], or a slot whose four probabilities sum to 1 off by more than
        ``SUM_TOLERANCE`` (1e-6 absolute)."""
        return probability_problem(value)

    def _canonical(self, value: np.ndarray) -> bytes:
        """The shape (int64 little-endian) then the values (float64 little-endian, row-major)."""
        return np.asarray(value.shape, dtype="<i8").tobytes() + np.ascontiguousarray(value, dtype="<f8").tobytes()

    def _decode(self, table: pa.Table) -> Iterator[tuple[np.ndarray | None, str | None]]:
        slots = table.column("slots").to_pylist()
        probs = table.column("probs").combine_chunks()
        offsets = probs.offsets.to_numpy()
        flat = probs.values.to_numpy(zero_copy_only=False)  # a null value reads as NaN: refused
        null = probs.is_null().to_numpy(zero_copy_only=False)
        for i, n in enumerate(slots):
            if null[i]:
                yield None, "no probabilities"
                continue
            arr = flat[offsets[i] : offsets[i + 1]]
            # A slot has 4 grades, or a render scale's count (the checksum covers the shape).
            if n is None or n <= 0 or arr.size % n or arr.size // n < 2:
                yield None, f"{arr.size} values for {n} slots"
                continue
            yield arr.astype(np.float64).reshape(n, arr.size // n), None

    def _encode(self, keys: list[str], entries: Mapping[str, np.ndarray]) -> dict[str, pa.Array]:
        return {"slots": pa.array([entries[k].shape[0] for k in keys], pa.int32()),
                "probs": pa.array([entries[k].reshape(-1).tolist() for k in keys], pa.list_(pa.float64()))}


class Stopwatch:
    """Seconds spent inside ``with`` blocks, summed."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self):
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds += time.perf_counter() - self._t0
        return False


__all__ = ["FORMAT_VERSION", "SUM_TOLERANCE", "ReadCache", "Stopwatch", "entry_key", "probability_problem"]
