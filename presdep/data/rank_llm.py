"""rank_llm's retrieve-results JSON: ``[{"query", "hits": [{"content", "qid", "docid", "rank", "score"}]}]``.

Read as candidates (:func:`read_rank_llm_json`) or as a text source, corpus format
``rank_llm_json`` (:func:`iter_rank_llm_docs`: each hit's docid and content; a docid in
several queries must carry the same content). Ids follow :mod:`presdep.data.guards`, ranks
fit Int32 and scores are finite (JSON's ``NaN``/``Infinity`` and ``1e400`` are refused).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, NamedTuple

import polars as pl

from presdep.contracts.errors import InputFormatError, cut
from presdep.data.doc import Doc
from presdep.data.guards import check_finite, check_id, check_int32
from presdep.data.text_input import json_list

_HIT_FIELDS = ("content", "qid", "docid", "rank", "score")


class Hit(NamedTuple):
    where: str  # "entry i hit j", for messages
    query_id: str
    query: str
    doc_id: str
    content: str
    rank: int
    score: float


def iter_hits(path: str | Path) -> Iterator[Hit]:
    """Every hit of the file, checked, in file order (errors name the entry and hit)."""
    entries = json_list(path, "{query, hits} objects")
    seen_queries: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"entry {i}"
        if not isinstance(entry, dict) or "query" not in entry or "hits" not in entry:
            raise InputFormatError(path, where, "expected an object with keys 'query' and 'hits'")
        hits = entry["hits"]
        if not isinstance(hits, list) or not hits:
            raise InputFormatError(path, where, f"query {cut(entry.get('query'))} has no candidates ('hits' is empty)")
        qid = None
        seen_docs: set[str] = set()
        for j, hit in enumerate(hits):
            hwhere = f"entry {i} hit {j}"
            if not isinstance(hit, dict):
                raise InputFormatError(path, hwhere, "expected an object")
            missing = [f for f in _HIT_FIELDS if f not in hit]
            if missing:
                raise InputFormatError(path, hwhere, f"missing field(s) {missing}; expected {list(_HIT_FIELDS)}")
            hit_qid = check_id(path, hwhere, str(hit["qid"]), "query id")
            qid = qid or hit_qid
            if hit_qid != qid:
                raise InputFormatError(path, hwhere, f"qid {cut(hit_qid)} differs from the entry's qid {cut(qid)}")
            did = check_id(path, hwhere, str(hit["docid"]), "document id")
            if did in seen_docs:
                raise InputFormatError(path, hwhere, f"document {cut(did)} appears twice for query {cut(qid)}")
            seen_docs.add(did)
            if not isinstance(hit["content"], str):
                raise InputFormatError(path, hwhere, "'content' must be a string")
            try:
                rank, score = int(hit["rank"]), float(hit["score"])
            except (TypeError, ValueError, OverflowError):
                raise InputFormatError(path, hwhere, "'rank' must be an integer and 'score' a number") from None
            check_int32(path, hwhere, rank, "rank")
            check_finite(path, hwhere, score, "score", hit["score"])
            yield Hit(hwhere, qid, str(entry["query"]), did, hit["content"], rank, score)
        if qid in seen_queries:
            raise InputFormatError(path, where, f"query {cut(qid)} appears in two entries")
        seen_queries.add(qid)


def read_rank_llm_json(path: str | Path) -> pl.DataFrame:
    """Candidates with text in the candidates contract, first-stage order as given by ``rank``."""
    rows: dict[str, list] = {k: [] for k in ("query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score")}
    for hit in iter_hits(path):
        rows["query_id"].append(hit.query_id)
        rows["query"].append(hit.query)
        rows["doc_id"].append(hit.doc_id)
        rows["doc"].append(hit.content)
        rows["first_stage_rank"].append(hit.rank)
        rows["first_stage_score"].append(hit.score)
    if not rows["query_id"]:
        raise InputFormatError(path, "top level", "no queries found")
    return pl.DataFrame(
        rows,
        schema={
            "query_id": pl.String, "query": pl.String, "doc_id": pl.String, "doc": pl.String,
            "first_stage_rank": pl.Int32, "first_stage_score": pl.Float64,
        },
    )


def iter_rank_llm_docs(path: str | Path) -> Iterator[Doc]:
    """The file's passages as a corpus, each docid once (no title: rank_llm keeps one text).

    The whole file is checked before the first document is yielded, so a docid whose
    content differs between two queries is an error even for a caller that stops early.
    """
    first: dict[str, Hit] = {}
    for hit in iter_hits(path):
        seen = first.get(hit.doc_id)
        if seen is None:
            first[hit.doc_id] = hit
        elif seen.content != hit.content:
            raise InputFormatError(path, hit.where, f"document {cut(hit.doc_id)} has a different content here than "
                                   f"in {seen.where} ({cut(hit.content)} vs {cut(seen.content)}); one docid, one text")
    if not first:
        raise InputFormatError(path, "top level", "no queries found")
    return (Doc(h.doc_id, "", h.content) for h in first.values())
