"""Deterministic pseudo-English for the rehearsal's synthetic originals, and their byte-stable writers.

Invented key words (consonant-vowel syllables closed by n, m or k, each handed out once), filler
sentences, seeded generators and hex ids; JSON with sorted keys, and Parquet, gzip and zip
without a clock.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from presdep.contracts.schemas import atomic_write

# --------------------------------------------------------------------------- words

_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_CODAS = "nmk"
_SYLLABLES = [c + v for c in _ONSETS for v in _VOWELS]
_WORD_SPACE = len(_SYLLABLES) ** 3 * len(_CODAS)
_WORD_STEP = 7919  # coprime with _WORD_SPACE (2^3 * 3 * 5^3 * 7^3): i -> word is one-to-one

# Shared filler; none of it is a word of the query templates, so only key words match a query.
FILLER = (
    "river", "stone", "cloud", "maple", "tiger", "ocean", "lemon", "piano", "harbor", "valley", "copper",
    "garden", "lantern", "meadow", "signal", "ledger", "market", "winter", "summer", "engine", "basket",
    "island", "mirror", "orchard", "pepper", "silver", "timber", "tunnel", "velvet", "window", "canyon",
    "circle", "desert", "forest", "glacier", "hollow", "journal", "kettle", "ladder", "marble", "needle",
    "pillar", "quarry", "ribbon", "saddle", "tablet", "violet", "wagon", "anchor", "beacon", "candle",
    "harvest", "compass", "feather", "granite", "helmet", "lagoon", "parcel", "riddle", "shelter",
)
VERBS = ("describes", "records", "reports", "mentions", "explains", "lists", "notes", "covers", "traces", "compares")
QUERY_TEMPLATES = (
    "what is the {0} of {1} {2}", "how does {0} {1} affect {2}", "{0} {1} {2} definition",
    "where is {0} {1} {2} found", "why do {0} and {1} share {2}", "which {0} {1} has {2}",
)


class Vocab:
    """Invented words, each handed out once per write (so a key word belongs to one query)."""

    def __init__(self, seed: int) -> None:
        self._next = 0
        self._offset = random.Random(f"vocab:{seed}").randrange(_WORD_SPACE)

    def word(self) -> str:
        n = (self._next * _WORD_STEP + self._offset) % _WORD_SPACE
        self._next += 1
        if self._next > _WORD_SPACE:
            raise ValueError("the invented-word space is exhausted")
        n, coda = divmod(n, len(_CODAS))
        parts = []
        for _ in range(3):
            n, s = divmod(n, len(_SYLLABLES))
            parts.append(_SYLLABLES[s])
        return "".join(parts) + _CODAS[coda]

    def words(self, k: int) -> list[str]:
        return [self.word() for _ in range(k)]

    def title(self, k: int = 2) -> str:
        return " ".join(w.capitalize() for w in self.words(k))


def sentence(rng: random.Random, keys: Sequence[str] = (), n_filler: int = 6) -> str:
    """A sentence of filler words with ``keys`` placed among them."""
    words = [rng.choice(FILLER) for _ in range(n_filler)] + list(keys)
    rng.shuffle(words)
    verb_at = rng.randrange(1, len(words))
    words.insert(verb_at, rng.choice(VERBS))
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."  # names keep their capitals


def keyed_text(rng: random.Random, keys: Sequence[str], sentences: int = 3) -> str:
    """Sentences sharing out ``keys`` (a key may repeat, which BM25 rewards)."""
    parts: list[list[str]] = [[] for _ in range(sentences)]
    for i, k in enumerate(keys):
        parts[i % sentences].append(k)
    return " ".join(sentence(rng, p, rng.randint(4, 8)) for p in parts)


def seeded_rng(seed: int, *what: object) -> random.Random:
    return random.Random(":".join(map(str, (seed, *what))))


def hex_id(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


# --------------------------------------------------------------------------- writers


def json_text(obj: Any, indent: int | None = None) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=indent)


def jsonl_text(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json_text(r) + "\n" for r in rows)


def write_parquet(path: Path, table: pa.Table) -> Path:
    # Fixed settings: one row group, snappy (as the hub's exports), no pandas metadata.
    return atomic_write(path, lambda tmp: pq.write_table(table, str(tmp), compression="snappy",
                                                         row_group_size=max(table.num_rows, 1)))


def gzip_bytes(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


_ZIP_TIME = (2020, 4, 7, 0, 0, 0)


def zip_bytes(members: Mapping[str, str]) -> bytes:
    """A zip of text members (``folder/`` entries first, as archivers write them), without a clock."""
    buf = io.BytesIO()
    folders = sorted({m.rsplit("/", 1)[0] + "/" for m in members if "/" in m})
    with zipfile.ZipFile(buf, "w") as zf:
        for d in folders:
            info = zipfile.ZipInfo(d, date_time=_ZIP_TIME)
            info.external_attr = (0o40755 << 16) | 0x10
            zf.writestr(info, b"")
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100644 << 16
            zf.writestr(info, members[name].encode("utf-8"))
    return buf.getvalue()

