"""rank_llm's retrieve-results JSON: ``[{"query", "hits": [{"content", "qid", "docid", "rank", "score"}]}]``."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from presdep.contracts.errors import InputFormatError
from presdep.data.text_input import json_list

_HIT_FIELDS = ("content", "qid", "docid", "rank", "score")


def read_rank_llm_json(path: str | Path) -> pl.DataFrame:
    """Candidates with text in the candidates contract, first-stage order as given by ``rank``."""
    entries = json_list(path, "{query, hits} objects")
    rows: dict[str, list] = {k: [] for k in ("query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score")}
    seen_queries: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"entry {i}"
        if not isinstance(entry, dict) or "query" not in entry or "hits" not in entry:
            raise InputFormatError(path, where, "expected an object with keys 'query' and 'hits'")
        hits = entry["hits"]
        if not isinstance(hits, list) or not hits:
            raise InputFormatError(path, where, f"query {entry.get('query')!r} has no candidates ('hits' is empty)")
        qid = None
        seen_docs: set[str] = set()
        for j, hit in enumerate(hits):
            hwhere = f"entry {i} hit {j}"
            if not isinstance(hit, dict):
                raise InputFormatError(path, hwhere, "expected an object")
            missing = [f for f in _HIT_FIELDS if f not in hit]
            if missing:
                raise InputFormatError(path, hwhere, f"missing field(s) {missing}; expected {list(_HIT_FIELDS)}")
            hit_qid = str(hit["qid"])
            qid = qid or hit_qid
            if hit_qid != qid:
                raise InputFormatError(path, hwhere, f"qid {hit_qid!r} differs from the entry's qid {qid!r}")
            did = str(hit["docid"])
            if did in seen_docs:
                raise InputFormatError(path, hwhere, f"document {did!r} appears twice for query {qid!r}")
            seen_docs.add(did)
            if not isinstance(hit["content"], str):
                raise InputFormatError(path, hwhere, "'content' must be a string")
            try:
                rank, score = int(hit["rank"]), float(hit["score"])
            except (TypeError, ValueError):
                raise InputFormatError(path, hwhere, "'rank' must be an integer and 'score' a number") from None
            rows["query_id"].append(qid)
            rows["query"].append(str(entry["query"]))
            rows["doc_id"].append(did)
            rows["doc"].append(hit["content"])
            rows["first_stage_rank"].append(rank)
            rows["first_stage_score"].append(score)
        if qid in seen_queries:
            raise InputFormatError(path, where, f"query {qid!r} appears in two entries")
        seen_queries.add(qid)
    if not rows["query_id"]:
        raise InputFormatError(path, "top level", "no queries found")
    return pl.DataFrame(
        rows,
        schema={
            "query_id": pl.String, "query": pl.String, "doc_id": pl.String, "doc": pl.String,
            "first_stage_rank": pl.Int32, "first_stage_score": pl.Float64,
        },
    )
