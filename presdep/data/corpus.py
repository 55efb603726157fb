"""Corpus and query readers for JSON-lines collections (BEIR folders and plain JSONL).

Formats (the ``format`` key of a corpus/topics source in the config):

- ``beir``: a BEIR folder (``corpus.jsonl[.gz]`` with ``_id``, ``title``, ``text``;
  ``queries.jsonl`` with ``_id``, ``text``; ``qrels/<split>.tsv``), or the corpus /
  queries file itself.
- ``jsonl``: one JSON object per line. Documents: an id under ``_id``, ``id`` or
  ``docid`` (pyserini's JsonCollection uses ``id``) and text under ``text`` or
  ``contents``, optional ``title``. Queries: id under ``_id``, ``id``, ``query_id`` or
  ``qid`` and text under ``text`` or ``query``.
- ``tsv`` / ``trec``: queries only, ``qid<TAB>text`` (Anserini topics).
- ``irds``: an ir_datasets id instead of a path (see :mod:`presdep.data.irds`).

Every malformed record is reported with the file and its 1-based line number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from presdep.contracts.errors import InputFormatError, InvalidInput
from presdep.data.doc import Doc
from presdep.data.text_input import json_records

CORPUS_FORMATS = ("beir", "jsonl", "irds")
TOPIC_FORMATS = ("beir", "jsonl", "tsv", "trec", "irds")

DOC_ID_KEYS = ("_id", "id", "docid")
DOC_TEXT_KEYS = ("text", "contents")
QUERY_ID_KEYS = ("_id", "id", "query_id", "qid")
QUERY_TEXT_KEYS = ("text", "query")


def source_location(source: Mapping[str, Any]) -> str:
    """The path (or, for ``irds``, the ir_datasets id) of a corpus/topics config entry."""
    fmt = source.get("format")
    key = "id" if fmt == "irds" else "path"
    if not source.get(key):
        raise InvalidInput(f"a {fmt!r} source needs {key!r}, got {dict(source)}")
    return str(source[key])


def _beir_file(folder_or_file: Path, stem: str) -> Path:
    """``stem.jsonl`` or ``stem.jsonl.gz`` inside a BEIR folder, or the file itself."""
    p = Path(folder_or_file)
    if not p.is_dir():
        if not p.exists():
            raise FileNotFoundError(f"BEIR input not found: {p}")
        return p
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (p / name).is_file():
            return p / name
    raise FileNotFoundError(f"BEIR folder {p} has neither {stem}.jsonl nor {stem}.jsonl.gz")


def beir_corpus_file(path: str | Path) -> Path:
    return _beir_file(Path(path), "corpus")


def beir_queries_file(path: str | Path) -> Path:
    return _beir_file(Path(path), "queries")


def _pick(obj: dict, keys: tuple[str, ...], path: Path, number: int, what: str, *, allow_empty: bool) -> str:
    for key in keys:
        if key in obj:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise InputFormatError(path, f"line {number}", f"{what} field {key!r} must be a string, got {type(value).__name__}")
            value = str(value)
            if not allow_empty and not value.strip():
                raise InputFormatError(path, f"line {number}", f"{what} field {key!r} is empty")
            return value
    raise InputFormatError(
        path, f"line {number}", f"missing {what} field (expected one of {list(keys)}; found {sorted(obj)[:10]})"
    )


def iter_jsonl_docs(path: str | Path, *, id_keys: tuple[str, ...] = DOC_ID_KEYS, text_keys: tuple[str, ...] = DOC_TEXT_KEYS) -> Iterator[Doc]:
    """Documents from a JSON-lines file; duplicate ids are an error (Lucene would keep both)."""
    path = Path(path)
    seen: set[str] = set()
    for number, obj in json_records(path):
        doc_id = _pick(obj, id_keys, path, number, "document id", allow_empty=False).strip()
        # BEIR has a few documents with an empty text but a title; the field must exist.
        text = _pick(obj, text_keys, path, number, "document text", allow_empty=True)
        title = obj.get("title", "")
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise InputFormatError(path, f"line {number}", f"'title' must be a string, got {type(title).__name__}")
        if not (title.strip() or text.strip()):
            raise InputFormatError(path, f"line {number}", f"document {doc_id!r} has neither title nor text")
        if doc_id in seen:
            raise InputFormatError(path, f"line {number}", f"document id {doc_id!r} appears twice")
        seen.add(doc_id)
        yield Doc(doc_id, title, text)


def iter_corpus(path: str | Path, fmt: str) -> Iterator[Doc]:
    """All documents of a corpus source (``path`` is an ir_datasets id for ``irds``)."""
    if fmt == "beir":
        # BEIR names its fields exactly; do not accept pyserini-style keys there.
        return iter_jsonl_docs(beir_corpus_file(path), id_keys=("_id",), text_keys=("text",))
    if fmt == "jsonl":
        return iter_jsonl_docs(Path(path))
    if fmt == "irds":
        from presdep.data.irds import iter_docs

        return iter_docs(str(path))
    raise InvalidInput(f"unknown corpus format {fmt!r}; expected one of {CORPUS_FORMATS}")


def read_jsonl_queries(path: str | Path, *, id_keys: tuple[str, ...] = QUERY_ID_KEYS, text_keys: tuple[str, ...] = QUERY_TEXT_KEYS) -> dict[str, str]:
    path = Path(path)
    topics: dict[str, str] = {}
    for number, obj in json_records(path):
        qid = _pick(obj, id_keys, path, number, "query id", allow_empty=False).strip()
        text = _pick(obj, text_keys, path, number, "query text", allow_empty=False).strip()
        if qid in topics:
            raise InputFormatError(path, f"line {number}", f"query id {qid!r} appears twice")
        topics[qid] = text
    if not topics:
        raise InputFormatError(path, "whole file", "no queries found")
    return topics


def read_beir_queries(path: str | Path, split: str | None = "test") -> dict[str, str]:
    """BEIR queries; in a folder with ``qrels/<split>.tsv`` only the queries judged there.

    BEIR's ``queries.jsonl`` holds every split's queries; evaluation uses those that
    appear in the split's qrels (as BEIR's own loader does).
    """
    path = Path(path)
    topics = read_jsonl_queries(beir_queries_file(path), id_keys=("_id",), text_keys=("text",))
    qrels_file = path / "qrels" / f"{split}.tsv" if (split and path.is_dir()) else None
    if qrels_file is not None and qrels_file.is_file():
        from presdep.data.beir import read_beir_qrels

        judged = set(read_beir_qrels(qrels_file)["query_id"].to_list())
        missing = sorted(judged - topics.keys())
        if missing:
            raise InputFormatError(
                qrels_file, "whole file", f"{len(missing)} judged query id(s) not in {beir_queries_file(path)}, e.g. {missing[:3]}"
            )
        topics = {q: t for q, t in topics.items() if q in judged}
    return topics


def read_queries(path: str | Path, fmt: str, *, split: str | None = "test", field: str | None = None) -> dict[str, str]:
    """Queries of a topics source as {query_id: text}, in file order."""
    if fmt == "beir":
        return read_beir_queries(path, split)
    if fmt == "jsonl":
        return read_jsonl_queries(path)
    if fmt in ("tsv", "trec"):
        from presdep.data.trec import read_topics

        return read_topics(path)
    if fmt == "irds":
        from presdep.data.irds import load_topics

        return load_topics(str(path), field=field)
    raise InvalidInput(f"unknown topics format {fmt!r}; expected one of {TOPIC_FORMATS}")


def lookup_docs(path: str | Path, fmt: str, doc_ids: Iterable[str]) -> dict[str, Doc]:
    """The documents with the given ids, in one streaming pass over the corpus.

    Raises KeyError naming the missing ids, so a run from a different corpus fails loudly.
    """
    wanted = set(doc_ids)
    found: dict[str, Doc] = {}
    for doc in iter_corpus(path, fmt):
        if doc.doc_id in wanted:
            found[doc.doc_id] = doc
            if len(found) == len(wanted):
                break
    missing = sorted(wanted - found.keys())
    if missing:
        raise KeyError(f"{len(missing)} document id(s) not found in corpus {path} ({fmt}), e.g. {missing[:5]}")
    return found
