"""Corpus and topics sources: one dispatch table per kind, and the JSON-lines / TSV readers.

Formats (the ``format`` key of a corpus/topics source in the config; the schema's
``$defs/corpus_source`` and ``$defs/topics_source`` enums equal :data:`CORPUS_READERS` and
:data:`TOPICS_READERS`, a unit test keeps them so; one row of each format is shown in
docs/guide/datasets.md):

- ``beir``: a BEIR folder (``corpus.jsonl[.gz]`` with ``_id``, ``title``, ``text``;
  ``queries.jsonl`` with ``_id``, ``text``; ``qrels/<split>.tsv``), or the corpus /
  queries file itself.
- ``jsonl``: one JSON object per line. Documents: an id under ``_id``, ``id`` or
  ``docid`` (pyserini's JsonCollection uses ``id``) and text under ``text`` or
  ``contents``, optional ``title``. Queries: id under ``_id``, ``id``, ``query_id`` or
  ``qid`` and text under ``text`` or ``query``.
- ``tsv``: ``id<TAB>text`` per line. Documents as MS MARCO's ``collection.tsv``
  (``pid<TAB>passage``): the text is everything after the first tab, as written; there
  is no title column (MS MARCO passages have none; give titled documents as jsonl or beir).
  Queries as Anserini's topics files (``qid<TAB>text``).
- ``trec``: documents in TREC SGML (``<DOC><DOCNO>``, :mod:`presdep.data.trec_sgml`);
  topics as ``qid<TAB>text`` or SGML ``<top>`` blocks, told apart by the first non-blank
  line (:func:`presdep.data.trec.read_topics`).
- ``irds``: an ir_datasets id instead of a path (see :mod:`presdep.data.irds`).
- ``rank_llm_json`` (corpus only): rank_llm's retrieve-results JSON, each hit's docid and
  content (:func:`presdep.data.rank_llm.iter_rank_llm_docs`).

Every malformed record is reported with the file and its 1-based line number (or JSON
entry); ids follow :mod:`presdep.data.guards` (at most 512 characters, no control character).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from presdep.contracts.errors import InputFormatError, InvalidInput, cut
from presdep.data import sniff
from presdep.data.doc import Doc
from presdep.data.guards import check_id
from presdep.data.text_input import json_records, text_lines

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
        path, f"line {number}", f"missing {what} field (expected one of {list(keys)}; found {cut(sorted(obj)[:10])})"
    )


def iter_jsonl_docs(path: str | Path, *, id_keys: tuple[str, ...] = DOC_ID_KEYS, text_keys: tuple[str, ...] = DOC_TEXT_KEYS) -> Iterator[Doc]:
    """Documents from a JSON-lines file; duplicate ids are an error (Lucene would keep both)."""
    path = Path(path)
    seen: set[str] = set()
    for number, obj in json_records(path):
        doc_id = _pick(obj, id_keys, path, number, "document id", allow_empty=False).strip()
        check_id(path, f"line {number}", doc_id, "document id")
        # BEIR has a few documents with an empty text but a title; the field must exist.
        text = _pick(obj, text_keys, path, number, "document text", allow_empty=True)
        title = obj.get("title", "")
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise InputFormatError(path, f"line {number}", f"'title' must be a string, got {type(title).__name__}")
        if not (title.strip() or text.strip()):
            raise InputFormatError(path, f"line {number}", f"document {cut(doc_id)} has neither title nor text")
        if doc_id in seen:
            raise InputFormatError(path, f"line {number}", f"document id {cut(doc_id)} appears twice")
        seen.add(doc_id)
        yield Doc(doc_id, title, text)


_NOT_TEXT = (sniff.TREC_QRELS, sniff.TREC_RUN, sniff.BEIR_QRELS)


def iter_tsv_docs(path: str | Path) -> Iterator[Doc]:
    """``docid<TAB>text`` per line (MS MARCO's collection.tsv); duplicate ids are an error."""
    path = Path(path)
    seen: set[str] = set()
    for number, line in text_lines(path):
        if not line.strip():
            continue
        where = f"line {number}"
        doc_id, tab, text = line.partition("\t")
        # A tab-separated qrels/run line splits into an id and a "text" too: refuse it on the first line.
        judgement = not seen and line.count("\t") >= 2 and sniff.guess(line) in _NOT_TEXT
        if not tab or not doc_id.strip() or judgement:
            raise InputFormatError(path, where, f"expected 'docid<TAB>text', got {cut(line)}"
                                   f"{sniff.hint(line, sniff.TOPICS_TSV, path)}")
        doc_id = check_id(path, where, doc_id.strip(), "document id")
        if not text.strip():
            raise InputFormatError(path, where, f"document {cut(doc_id)} has no text")
        if doc_id in seen:
            raise InputFormatError(path, where, f"document id {cut(doc_id)} appears twice")
        seen.add(doc_id)
        yield Doc(doc_id, "", text)
    if not seen:
        raise InputFormatError(path, "whole file", "no documents found")


def _beir_docs(path: str | Path) -> Iterator[Doc]:
    # BEIR names its fields exactly; do not accept pyserini-style keys there.
    return iter_jsonl_docs(beir_corpus_file(path), id_keys=("_id",), text_keys=("text",))


def _trec_docs(path: str | Path) -> Iterator[Doc]:
    from presdep.data.trec_sgml import iter_trec_docs

    return iter_trec_docs(path)


def _irds_docs(irds_id: str | Path) -> Iterator[Doc]:
    from presdep.data.irds import iter_docs

    return iter_docs(str(irds_id))


def _rank_llm_docs(path: str | Path) -> Iterator[Doc]:
    from presdep.data.rank_llm import iter_rank_llm_docs

    return iter_rank_llm_docs(path)


# format -> reader: the one table of corpus formats (the schema's enum equals its keys).
CORPUS_READERS: dict[str, Callable[[str | Path], Iterator[Doc]]] = {
    "beir": _beir_docs,
    "jsonl": lambda path: iter_jsonl_docs(Path(path)),
    "tsv": iter_tsv_docs,
    "trec": _trec_docs,
    "irds": _irds_docs,
    "rank_llm_json": _rank_llm_docs,
}
CORPUS_FORMATS = tuple(CORPUS_READERS)


def iter_corpus(path: str | Path, fmt: str) -> Iterator[Doc]:
    """All documents of a corpus source (``path`` is an ir_datasets id for ``irds``)."""
    reader = CORPUS_READERS.get(fmt)
    if reader is None:
        raise InvalidInput(f"unknown corpus format {fmt!r}; expected one of {CORPUS_FORMATS}")
    return reader(path)


def read_jsonl_queries(path: str | Path, *, id_keys: tuple[str, ...] = QUERY_ID_KEYS, text_keys: tuple[str, ...] = QUERY_TEXT_KEYS) -> dict[str, str]:
    path = Path(path)
    topics: dict[str, str] = {}
    for number, obj in json_records(path):
        qid = _pick(obj, id_keys, path, number, "query id", allow_empty=False).strip()
        check_id(path, f"line {number}", qid, "query id")
        text = _pick(obj, text_keys, path, number, "query text", allow_empty=False).strip()
        if qid in topics:
            raise InputFormatError(path, f"line {number}", f"query id {cut(qid)} appears twice")
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
                qrels_file, "whole file",
                f"{len(missing)} judged query id(s) not in {beir_queries_file(path)}, "
                f"e.g. {', '.join(map(cut, missing[:3]))}"
            )
        topics = {q: t for q, t in topics.items() if q in judged}
    return topics


def _tsv_topics(path: str | Path, split: str | None, field: str | None) -> dict[str, str]:
    from presdep.data.trec import read_tsv_topics

    return read_tsv_topics(path)


def _trec_topics(path: str | Path, split: str | None, field: str | None) -> dict[str, str]:
    from presdep.data.trec import read_topics

    return read_topics(path, field)


def _irds_topics(irds_id: str | Path, split: str | None, field: str | None) -> dict[str, str]:
    from presdep.data.irds import load_topics

    return load_topics(str(irds_id), field=field)


# format -> reader(path, split, field): the one table of topics formats (= the schema's enum).
TOPICS_READERS: dict[str, Callable[[str | Path, str | None, str | None], dict[str, str]]] = {
    "beir": lambda path, split, field: read_beir_queries(path, split),
    "jsonl": lambda path, split, field: read_jsonl_queries(path),
    "tsv": _tsv_topics,
    "trec": _trec_topics,
    "irds": _irds_topics,
}
TOPIC_FORMATS = tuple(TOPICS_READERS)


def read_queries(path: str | Path, fmt: str, *, split: str | None = "test", field: str | None = None) -> dict[str, str]:
    """Queries of a topics source as {query_id: text}, in file order."""
    reader = TOPICS_READERS.get(fmt)
    if reader is None:
        raise InvalidInput(f"unknown topics format {fmt!r}; expected one of {TOPIC_FORMATS}")
    return reader(path, split, field)


class MissingDocumentsError(InputFormatError, KeyError):
    """Ids of a run (or candidates file) that its corpus lacks; a KeyError too, as it always was."""

    __str__ = InputFormatError.__str__  # KeyError's own would quote the whole message


def lookup_docs(path: str | Path, fmt: str, doc_ids: Iterable[str],
                ids_from: str | Path | None = None) -> dict[str, Doc]:
    """The documents with the given ids, in one streaming pass over the corpus.

    Missing ids are a :class:`MissingDocumentsError` naming the corpus, the file the ids came
    from (``ids_from``, when the caller knows it) and a few ids, cut: a run from another
    collection fails loudly.
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
        origin = f" of {ids_from}" if ids_from else ""
        shown = ", ".join(cut(d) for d in missing[:5])
        raise MissingDocumentsError(
            path, "whole file", f"{len(missing)} document id(s){origin} are not in this corpus (format {fmt}), "
            f"e.g. {shown}; the run and the corpus must come from the same collection")
    return found
