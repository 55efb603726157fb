"""A content-addressed cache of reader answers: each distinct reader prompt is generated once.

An entry is the greedy continuation (raw text) of one reader prompt, keyed by its exact
token ids (the reader prompt, the question, the paragraphs in order and their cut are all
in them). The identity folder holds everything else an answer depends on: the model (its
pin or the hash of its weights), dtype, device type, decoding settings, batch size and the
torch / transformers versions. Variants whose top-k paragraphs coincide (Round-robin and
off the shelf on one-prompt QA lists, the first-stage order of every presentation) share
answers, as do re-runs and config edits.

With ``batch_size: 1`` (the CPU default) an answer depends on its prompt alone, so a hit
equals a fresh generation bit for bit. With larger batches a prompt's answer is the one
of the batch that first generated it; every later job reuses it, so two variants showing
the reader the same paragraphs get the same answer.

Each entry's checksum covers the identity, its key and the text's UTF-8 bytes
(:mod:`presdep.runtime.content_cache`); a shard with an entry that does not match, or one
copied in from another identity's folder, is quarantined and its answers are generated again.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from presdep.contracts.errors import InvalidInput
from presdep.runtime.content_cache import ContentCache, shard_schema

log = logging.getLogger(__name__)


def prompt_key(ids: Sequence[int]) -> str:
    """The key of one reader prompt: sha256 over its token ids (int64, little-endian)."""
    return hashlib.sha256(np.asarray(ids, dtype="<i8").tobytes()).hexdigest()


class AnswerCache(ContentCache):
    """Raw generated texts per reader prompt of one reader identity under ``root``."""

    SCHEMA = shard_schema(("text", pa.string()))
    # 2: a per-entry sha256 column and Parquet page checksums. 3: the identity in every
    # entry's checksum and in each shard's metadata. Older shards live under other identity
    # folders and are no longer read: a cold cache.
    FORMAT_VERSION = 3
    KIND = "answer cache"

    def _check(self, text: Any) -> str:
        if not isinstance(text, str):
            raise InvalidInput(f"answer cache: an entry is the generated text (str), got {type(text).__name__}")
        return text

    def _canonical(self, text: str) -> bytes:
        """The text's UTF-8 bytes."""
        return text.encode("utf-8")

    def _decode(self, table: pa.Table) -> Iterator[tuple[str | None, str | None]]:
        for text in table.column("text").to_pylist():
            yield (None, "no text") if text is None else (text, None)

    def _encode(self, keys: list[str], entries: Mapping[str, str]) -> dict[str, pa.Array]:
        return {"text": pa.array([entries[k] for k in keys], pa.string())}


__all__ = ["AnswerCache", "prompt_key"]
