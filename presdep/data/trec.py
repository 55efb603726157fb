"""TREC topics, qrels and runs: strict readers with file/line errors, and writers."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import polars as pl

from presdep.contracts.errors import InputFormatError
from presdep.contracts.schemas import write_text_atomic
from presdep.data.text_input import text_lines


def read_topics(path: str | Path) -> dict[str, str]:
    """``qid<TAB>text`` per line (the Anserini topics format)."""
    topics: dict[str, str] = {}
    for number, line in text_lines(path):
        if not line.strip():
            continue
        parts = line.split("\t", 1)
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise InputFormatError(path, f"line {number}", f"expected 'qid<TAB>query text', got {line[:80]!r}")
        qid = parts[0].strip()
        if qid in topics:
            raise InputFormatError(path, f"line {number}", f"query id {qid!r} appears twice")
        topics[qid] = parts[1].strip()
    if not topics:
        raise InputFormatError(path, "whole file", "no topics found")
    return topics


def qrels_frame(path: str | Path, rows: Iterable[tuple[int, str, str, str]]) -> pl.DataFrame:
    """(line number, qid, docid, grade text) rows -> the qrels contract, refusing bad grades and repeats."""
    qids, dids, rels = [], [], []
    seen: set[tuple[str, str]] = set()
    for number, qid, did, grade in rows:
        try:
            rel = int(grade)
        except ValueError:
            raise InputFormatError(path, f"line {number}", f"grade {grade!r} is not an integer") from None
        if (qid, did) in seen:
            raise InputFormatError(path, f"line {number}", f"document {did!r} judged twice for query {qid!r}")
        seen.add((qid, did))
        qids.append(qid)
        dids.append(did)
        rels.append(rel)
    if not qids:
        raise InputFormatError(path, "whole file", "no judgements found")
    return pl.DataFrame(
        {"query_id": qids, "doc_id": dids, "relevance": rels},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
    )


def read_qrels(path: str | Path) -> pl.DataFrame:
    """``qid iter docid grade`` per line -> the qrels contract (query_id, doc_id, relevance)."""

    def rows():
        for number, line in text_lines(path):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 4:
                raise InputFormatError(
                    path, f"line {number}", f"expected 4 columns 'qid 0 docid grade', got {len(parts)}: {line[:80]!r}"
                )
            yield number, parts[0], parts[2], parts[3]

    return qrels_frame(path, rows())


def read_run(path: str | Path) -> pl.DataFrame:
    """``qid Q0 docid rank score tag`` per line -> query_id, doc_id, rank, score.

    The rank column is kept as written; callers that need trec_eval semantics order
    by score (ties by doc id descending), not by this column.
    """
    qids, dids, ranks, scores = [], [], [], []
    seen: set[tuple[str, str]] = set()
    for number, line in text_lines(path):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 6:
            raise InputFormatError(
                path, f"line {number}", f"expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}: {line[:80]!r}"
            )
        qid, _, did, rank, score, _tag = parts
        try:
            rank_i = int(rank)
            score_f = float(score)
        except ValueError:
            raise InputFormatError(
                path, f"line {number}", f"rank {rank!r} must be an integer and score {score!r} a number"
            ) from None
        if (qid, did) in seen:
            raise InputFormatError(path, f"line {number}", f"document {did!r} listed twice for query {qid!r}")
        seen.add((qid, did))
        qids.append(qid)
        dids.append(did)
        ranks.append(rank_i)
        scores.append(score_f)
    if not qids:
        raise InputFormatError(path, "whole file", "no run lines found")
    return pl.DataFrame(
        {"query_id": qids, "doc_id": dids, "rank": ranks, "score": scores},
        schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int32, "score": pl.Float64},
    )


def write_run(df: pl.DataFrame, path: str | Path, tag: str = "presdep") -> Path:
    """Write query_id, doc_id, rank, score as a TREC run (atomically)."""
    lines = [
        f"{q} Q0 {d} {r} {s:.6f} {tag}"
        for q, d, r, s in df.select("query_id", "doc_id", "rank", "score").iter_rows()
    ]
    return write_text_atomic(path, "\n".join(lines) + "\n")


def write_qrels(df: pl.DataFrame, path: str | Path) -> Path:
    lines = [f"{q} 0 {d} {r}" for q, d, r in df.select("query_id", "doc_id", "relevance").iter_rows()]
    return write_text_atomic(path, "\n".join(lines) + "\n")
