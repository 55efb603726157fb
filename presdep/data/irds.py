"""Collections by ir_datasets id (``ir_datasets.load(id)``): documents, topics, qrels.

ir_datasets downloads source files on first use into ``IR_DATASETS_HOME`` (default
``~/.ir_datasets``). Offline, place the source files at the cache paths ir_datasets
expects (e.g. ``beir/scifact/source.zip``); it then uses them without a download.
Licensed collections (Robust04, WaPo) must be placed that way in any case.
"""

from __future__ import annotations

import os
from typing import Iterator

import polars as pl

from presdep.contracts.errors import PresdepError
from presdep.data.doc import Doc
from presdep.data.guards import grade_error

_DOC_TEXT_FIELDS = ("text", "body")  # GenericDoc/BEIR use text; TREC disks use body
_QUERY_TEXT_FIELDS = ("text", "title")  # GenericQuery has text; TREC topics: title = the keyword query


class IrdsError(PresdepError, RuntimeError):
    """An ir_datasets id is unknown, lacks a component, or its files cannot be fetched."""


def _home() -> str:
    return os.environ.get("IR_DATASETS_HOME", os.path.join(os.path.expanduser("~"), ".ir_datasets"))


def load_dataset(irds_id: str):
    try:
        import ir_datasets
    except ImportError as exc:
        raise IrdsError(
            f"ir_datasets is not installed (needed for dataset {irds_id!r}); `pip install ir_datasets` "
            "or use the retrieval conda environment"
        ) from exc
    try:
        return ir_datasets.load(irds_id)
    except KeyError:
        raise IrdsError(f"unknown ir_datasets id {irds_id!r}; see https://ir-datasets.com for the catalogue") from None


def _fetch_error(irds_id: str, what: str, exc: BaseException) -> IrdsError:
    return IrdsError(
        f"ir_datasets could not provide the {what} of {irds_id!r}: {type(exc).__name__}: {exc}. "
        f"If this machine is offline or the collection is licensed, place its source files in the "
        f"ir_datasets cache (IR_DATASETS_HOME={_home()}) as ir_datasets documents for this id, "
        f"or point the config at local files (format beir/jsonl/trec)."
    )


def _require(ds, irds_id: str, component: str) -> None:
    if not getattr(ds, f"has_{component}")():
        raise IrdsError(f"ir_datasets id {irds_id!r} has no {component}")


def iter_docs(irds_id: str) -> Iterator[Doc]:
    """Documents as :class:`Doc` (title empty where the collection has none)."""
    ds = load_dataset(irds_id)
    _require(ds, irds_id, "docs")
    try:
        it = ds.docs_iter()
        first = True
        for doc in it:
            if first:
                fields = type(doc)._fields
                text_field = next((f for f in _DOC_TEXT_FIELDS if f in fields), None)
                has_title = "title" in fields
                first = False
            text = getattr(doc, text_field) if text_field else doc.default_text()
            title = (getattr(doc, "title") or "") if has_title else ""
            yield Doc(str(doc.doc_id), title, text or "")
    except IrdsError:
        raise
    except Exception as exc:  # noqa: BLE001 - downloads fail in many ways (IOError, HTTP, md5)
        raise _fetch_error(irds_id, "documents", exc) from exc


def load_topics(irds_id: str, field: str | None = None) -> dict[str, str]:
    """{query_id: text}; ``field`` picks a query field (e.g. ``description``), else text/title."""
    ds = load_dataset(irds_id)
    _require(ds, irds_id, "queries")
    fields = ds.queries_cls()._fields
    if field is None:
        field = next((f for f in _QUERY_TEXT_FIELDS if f in fields), None)
        if field is None:
            raise IrdsError(f"{irds_id!r}: queries have fields {fields}; name the text field explicitly")
    elif field not in fields:
        raise IrdsError(f"{irds_id!r}: queries have no field {field!r}; available: {fields}")
    topics: dict[str, str] = {}
    try:
        for q in ds.queries_iter():
            qid = str(q.query_id)
            if qid in topics:
                raise IrdsError(f"{irds_id!r}: query id {qid!r} appears twice")
            topics[qid] = str(getattr(q, field)).strip()
    except IrdsError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _fetch_error(irds_id, "queries", exc) from exc
    if not topics:
        raise IrdsError(f"{irds_id!r}: no queries")
    return topics


def load_qrels(irds_id: str) -> pl.DataFrame:
    """Judgements in the qrels contract (query_id, doc_id, relevance int32)."""
    ds = load_dataset(irds_id)
    _require(ds, irds_id, "qrels")
    rows: dict[tuple[str, str], int] = {}
    try:
        for qrel in ds.qrels_iter():
            key = (str(qrel.query_id), str(qrel.doc_id))
            reason = grade_error(int(qrel.relevance))
            if reason is not None:
                raise IrdsError(f"{irds_id!r}: document {key[1]!r} of query {key[0]!r}: {reason}")
            if key in rows and rows[key] != int(qrel.relevance):
                raise IrdsError(f"{irds_id!r}: document {key[1]!r} judged twice for query {key[0]!r} with different grades")
            rows[key] = int(qrel.relevance)
    except IrdsError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _fetch_error(irds_id, "qrels", exc) from exc
    if not rows:
        raise IrdsError(f"{irds_id!r}: no judgements")
    return pl.DataFrame(
        {"query_id": [k[0] for k in rows], "doc_id": [k[1] for k in rows], "relevance": list(rows.values())},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
    )
