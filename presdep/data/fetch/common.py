"""Shared pieces of the converters: checksums, the manifest, label-blind ids, writers, sampling."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from presdep import __version__
from presdep.contracts.errors import InputFormatError, PresdepError
from presdep.contracts.schemas import write_text_atomic
from presdep.data.duplicates import DuplicateTexts
from presdep.data.responses import blind_key
from presdep.data.text_input import json_list, json_records
from presdep.runtime.hashing import sha256_file

log = logging.getLogger(__name__)


class FetchError(PresdepError, RuntimeError):
    """A download or a local copy could not be obtained or verified."""


def sha256_paths(paths: Iterable[str | Path]) -> dict[str, str]:
    """sha256 of every file given (folders: every file inside, by relative path)."""
    out: dict[str, str] = {}
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(x for x in p.rglob("*") if x.is_file()):
                out[str(f)] = sha256_file(f)
        elif p.is_file():
            out[str(p)] = sha256_file(p)
        else:
            raise FetchError(f"local file not found: {p}")
    return out


def verify_sha256(path: str | Path, expected: str | None) -> str:
    """The file's sha256; a mismatch with the pinned value is an error naming both."""
    got = sha256_file(path)
    if expected and got != expected:
        raise FetchError(f"{path}: sha256 {got} does not match the catalogue's pinned {expected}")
    if not expected:
        log.warning("%s: no sha256 pinned in the catalogue; recorded %s in the manifest", path, got)
    return got


def label_blind_id(group: str, index: int) -> str:
    """A response id that says nothing about its label: 12 hex digits of sha256(group, index),
    i.e. of :func:`presdep.data.responses.blind_key` with the response's position as its key.

    Sources list preferred responses first; ordering by this id instead keeps the
    first-stage order (and so the identity scorer and chunk membership) label-blind.
    """
    return blind_key(group, str(index))[:12]


@dataclass
class Manifest:
    """What a fetch read and wrote: enough to audit or repeat it.

    ``files``: one entry per original file read (its name for a download, its path for a
    local copy), each with its own ``sha256`` and ``url``: the address it was downloaded
    from, or for a local copy the published address of the file it is byte-identical to
    (None when it matches no file the catalogue pins). ``sha256`` keeps the plain
    name -> digest map. ``folder``: the source-keyed subfolder of a local copy (None: the
    catalogue's own source, in ``resources/datasets/<id>/`` itself).
    """

    catalogue_id: str
    source: dict
    version: dict = field(default_factory=dict)
    sha256: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    files: dict = field(default_factory=dict)
    folder: str | None = None

    def write(self, path: str | Path) -> Path:
        body = {"catalogue_id": self.catalogue_id, "presdep_version": __version__, "source": self.source,
                "version": self.version, "sha256": self.sha256, "files": self.files, "folder": self.folder,
                "rows": self.rows, "notes": self.notes}
        return write_text_atomic(path, json.dumps(body, indent=2, sort_keys=True, default=str) + "\n")


def per_set(counts: Sequence[int]) -> dict[str, int]:
    """``{"min", "max"}`` of the items per query (candidates, paragraphs), for the manifest."""
    return {"min": min(counts), "max": max(counts)}


# --------------------------------------------------------------------------- ranked lists


@dataclass
class RankedQuery:
    """One query (or prompt) with its candidates in first-stage order and their grades."""

    query_id: str
    query: str
    docs: list[tuple[str, str, float]]  # (doc id, text, first-stage score)
    grades: dict[str, int] = field(default_factory=dict)  # doc id -> grade (judged docs only)


def write_ranked(queries: Sequence[RankedQuery], candidates: str | Path, qrels: str | Path) -> dict[str, int]:
    """rank_llm JSON (``[{query, hits: [{content, qid, docid, rank, score}]}]``) + TREC qrels."""
    if not queries:
        raise FetchError(f"{candidates}: nothing to write (no query survived conversion)")
    entries, lines, seen = [], [], set()
    duplicates = DuplicateTexts("candidate")
    for q in queries:
        if q.query_id in seen:
            raise FetchError(f"{candidates}: query id {q.query_id!r} appears twice")
        seen.add(q.query_id)
        duplicates.add(q.query_id, [text for _, text, _ in q.docs])
        entries.append({"query": q.query, "hits": [
            {"content": text, "qid": q.query_id, "docid": did, "rank": r, "score": float(score)}
            for r, (did, text, score) in enumerate(q.docs, start=1)]})
        lines += [f"{q.query_id} 0 {did} {int(g)}" for did, g in q.grades.items()]
    write_text_atomic(candidates, json.dumps(entries, ensure_ascii=False) + "\n")
    write_text_atomic(qrels, "\n".join(lines) + ("\n" if lines else ""))
    duplicates.warn(candidates)
    return {"queries": len(entries), "candidates": sum(len(q.docs) for q in queries), "judgements": len(lines),
            "candidates_per_query": per_set([len(q.docs) for q in queries]), "duplicate_texts": duplicates.as_dict()}


# --------------------------------------------------------------------------- QA records


@dataclass
class QARecord:
    """A multi-document QA question: paragraphs (title, text, supporting) in the given order."""

    qid: str
    question: str
    answers: list[str]
    paragraphs: list[tuple[str, str, bool]]


def select_paragraphs(rec: QARecord, paragraphs: int, supporting: int) -> QARecord | None:
    """The paper's geometry: exactly ``supporting`` supporting paragraphs plus the first
    non-supporting ones in the given order, AT MOST ``paragraphs`` in all (a question with
    fewer keeps every one it has), original order kept. None when the question has another
    number of supporting paragraphs."""
    sup = [i for i, p in enumerate(rec.paragraphs) if p[2]]
    if len(sup) != supporting:
        return None
    others = [i for i, p in enumerate(rec.paragraphs) if not p[2]][: max(paragraphs - supporting, 0)]
    keep = sorted(sup + others)
    return QARecord(rec.qid, rec.question, rec.answers, [rec.paragraphs[i] for i in keep])


def write_ircot(records: Sequence[QARecord], path: str | Path) -> dict[str, int]:
    """IRCoT's processed JSONL: question_id, question_text, answers_objects, contexts."""
    if not records:
        raise FetchError(f"{path}: nothing to write (no question survived conversion)")
    lines = []
    duplicates = DuplicateTexts("paragraph")
    for r in records:
        # As the QA reader shows a paragraph ("title: text"), so its count agrees with the fixture's.
        duplicates.add(r.qid, [f"{t.strip()}: {x.strip()}" if t.strip() else x.strip() for t, x, _ in r.paragraphs])
        lines.append(json.dumps({
            "question_id": r.qid,
            "question_text": r.question,
            "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": list(r.answers)}],
            "contexts": [{"id": j, "title": t, "paragraph_text": x, "is_supporting": s}
                         for j, (t, x, s) in enumerate(r.paragraphs)],
        }, ensure_ascii=False))
    write_text_atomic(path, "\n".join(lines) + "\n")
    duplicates.warn(path)
    return {"questions": len(records), "paragraphs": sum(len(r.paragraphs) for r in records),
            "paragraphs_per_question": per_set([len(r.paragraphs) for r in records]),
            "duplicate_texts": duplicates.as_dict()}


# --------------------------------------------------------------------------- reading originals


def read_rows(path: str | Path) -> Iterator[tuple[str, dict]]:
    """(where, row) from a Hugging Face data file as published: Parquet, JSONL or a JSON list."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"row {i}", row
        return
    if path.suffix == ".json":
        for i, row in enumerate(json_list(path, "records")):
            if not isinstance(row, dict):
                raise InputFormatError(path, f"entry {i}", f"expected a JSON object, got {type(row).__name__}")
            yield f"entry {i}", row
        return
    for number, row in json_records(path):
        yield f"line {number}", row


def need(path: Any, where: str, row: Mapping, keys: Sequence[str], what: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise InputFormatError(path, where, f"{what} lacks {missing} (has {sorted(row)[:12]})")


def sample_pool(n_items: int, n: int, seed: int) -> list[int]:
    """Indices of a seeded sample of ``n`` items, in sampled order (random.Random(seed).sample)."""
    if n > n_items:
        raise FetchError(f"the pool has {n_items} items, fewer than the {n} to sample")
    return random.Random(seed).sample(range(n_items), n)


def split_sampled(order: Sequence[Any], heldout: int, dev: int = 0) -> dict[str, list]:
    """train / dev / heldout of a sampled order: held-out = the last ``heldout``, dev the ``dev`` before it."""
    if heldout + dev >= len(order):
        raise FetchError(f"a sample of {len(order)} cannot hold {heldout} held-out and {dev} dev items")
    cut_h = len(order) - heldout
    cut_d = cut_h - dev
    return {"train": list(order[:cut_d]), "dev": list(order[cut_d:cut_h]), "heldout": list(order[cut_h:])}
