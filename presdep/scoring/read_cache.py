"""A content-addressed cache of model reads: each prompt's grade probabilities, read once.

An entry is one prompt's P(grade) per slot (float64, [slots, 4]), keyed by the exact
token ids and read positions; entries live in a folder per *identity*: the model (its
pinned source or the hash of its weights), the adapter's hash, the template's hash, the
dtype, the device type, the grade token ids and the torch / transformers versions. A
prompt that another variant, an earlier run or a killed job has read is never read again,
and a hit returns the stored float64 values, so scores built from it are bit-identical.

Storage (:mod:`presdep.runtime.content_cache`): ``<root>/<identity key>/identity.json`` and
Parquet shards (``key``, ``slots``, ``probs``), each renamed into place whole.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from presdep.contracts.errors import InvalidInput
from presdep.runtime.content_cache import ContentCache

log = logging.getLogger(__name__)

# Bump when the meaning of a stored read changes (it is part of every identity).
FORMAT_VERSION = 1
SHARD_SCHEMA = pa.schema([("key", pa.string()), ("slots", pa.int32()), ("probs", pa.list_(pa.float64()))])


def entry_key(ids: Sequence[int], read_positions: Sequence[int]) -> str:
    """The key of one prompt: sha256 over its token ids and read positions (int64, little-endian)."""
    h = hashlib.sha256()
    h.update(np.asarray(ids, dtype="<i8").tobytes())
    h.update(b"|")
    h.update(np.asarray(read_positions, dtype="<i8").tobytes())
    return h.hexdigest()


class ReadCache(ContentCache):
    """Grade probabilities per prompt (float64 [slots, 4]) of one scoring identity under ``root``."""

    SCHEMA = SHARD_SCHEMA
    FORMAT_VERSION = FORMAT_VERSION
    KIND = "read cache"

    def _check(self, probs: Any) -> np.ndarray:
        arr = np.asarray(probs, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != 4:
            raise InvalidInput(f"read cache: an entry is [slots, 4] grade probabilities, got shape {arr.shape}")
        return arr.copy()

    def _copy(self, value: np.ndarray) -> np.ndarray:
        return value.copy()

    def _decode(self, table: pa.Table, shard: str) -> Iterator[tuple[str, np.ndarray]]:
        for k, n, p in zip(table.column("key").to_pylist(), table.column("slots").to_pylist(),
                           table.column("probs").to_pylist()):
            arr = np.asarray(p, dtype=np.float64)
            if n is None or arr.size != 4 * n:
                log.warning("read cache: %s entry %s has %s values for %s slots; ignored", shard, k, arr.size, n)
                continue
            yield k, arr.reshape(n, 4)

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


__all__ = ["FORMAT_VERSION", "ReadCache", "Stopwatch", "entry_key"]
