"""TREC topics, qrels and runs: strict readers with file/line errors, and writers.

Every id goes through :func:`presdep.data.guards.check_id`, grades are bounded (``check_grade``), ranks must fit Int32,
run scores must be finite; a line in the wrong format says what it looks like
(:mod:`presdep.data.sniff`). Negative qrels grades are kept (trec_eval counts every grade
<= 0 as not relevant) and said once per file with their count and first line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

import polars as pl

from presdep.contracts.errors import InputFormatError, cut
from presdep.contracts.schemas import write_text_atomic
from presdep.data import sniff
from presdep.data.guards import check_finite, check_grade, check_id, check_int32
from presdep.data.text_input import text_lines

log = logging.getLogger(__name__)


def read_topics(path: str | Path, field: str | None = None) -> dict[str, str]:
    """TREC topics: ``qid<TAB>text`` per line (Anserini's topics files), or SGML ``<top>``
    blocks (the classic TREC topics), told apart by the first non-blank line. ``field`` picks
    an SGML field (title, the default; desc; narr); the tab format has one text."""
    if sniff.guess(sniff.first_line(path)) == sniff.SGML_TOPICS:
        from presdep.data.trec_sgml import read_sgml_topics

        return read_sgml_topics(path, field)
    return read_tsv_topics(path)


def read_tsv_topics(path: str | Path) -> dict[str, str]:
    """``qid<TAB>text`` per line (the Anserini topics format; format ``tsv``)."""
    topics: dict[str, str] = {}
    for number, line in text_lines(path):
        if not line.strip():
            continue
        parts = line.split("\t", 1)
        where = f"line {number}"
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise InputFormatError(path, where, f"expected 'qid<TAB>query text', got {cut(line)}"
                                   f"{sniff.hint(line, sniff.TOPICS_TSV, path)}")
        if line.count("\t") >= 2 and sniff.guess(line) in (sniff.TREC_QRELS, sniff.TREC_RUN, sniff.BEIR_QRELS):
            # A tab-separated qrels/run line splits into "qid" and "text" too: refuse it here.
            raise InputFormatError(path, where, f"expected 'qid<TAB>query text', got {cut(line)}"
                                   f"{sniff.hint(line, sniff.TOPICS_TSV, path)}")
        qid = check_id(path, where, parts[0].strip(), "query id")
        if qid in topics:
            raise InputFormatError(path, where, f"query id {cut(qid)} appears twice")
        topics[qid] = parts[1].strip()
    if not topics:
        raise InputFormatError(path, "whole file", "no topics found")
    return topics


def qrels_frame(path: str | Path, rows: Iterable[tuple[int, str, str, str]]) -> pl.DataFrame:
    """(line number, qid, docid, grade text) rows -> the qrels contract, refusing bad grades,
    ids and repeats; negative grades are kept and logged once (see the module docstring)."""
    qids, dids, rels = [], [], []
    seen: set[tuple[str, str]] = set()
    negative, first_negative = 0, None
    for number, qid, did, grade in rows:
        where = f"line {number}"
        try:
            rel = int(grade)
        except ValueError:
            raise InputFormatError(path, where, f"grade {cut(grade)} is not an integer") from None
        check_grade(path, where, rel)
        check_id(path, where, qid, "query id")
        check_id(path, where, did, "document id")
        if (qid, did) in seen:
            raise InputFormatError(path, where, f"document {cut(did)} judged twice for query {cut(qid)}")
        seen.add((qid, did))
        if rel < 0:
            negative += 1
            first_negative = first_negative or number
        qids.append(qid)
        dids.append(did)
        rels.append(rel)
    if not qids:
        raise InputFormatError(path, "whole file", "no judgements found")
    if negative:
        log.warning("%s: %d judgement(s) have a negative grade (first: line %d); kept, and counted as not "
                    "relevant as trec_eval does", path, negative, first_negative)
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
                    path, f"line {number}", f"expected 4 columns 'qid 0 docid grade', got {len(parts)}: {cut(line)}"
                    f"{sniff.hint(line, sniff.TREC_QRELS, path)}",
                )
            if not sniff.is_int(parts[3]) and sniff.hint(line, sniff.TREC_QRELS, path):
                # Four words that are no judgement, e.g. a topic: say what the line looks like.
                raise InputFormatError(path, f"line {number}", f"grade {cut(parts[3])} is not an integer"
                                       f"{sniff.hint(line, sniff.TREC_QRELS, path)}")
            yield number, parts[0], parts[2], parts[3]

    return qrels_frame(path, rows())


def read_run(path: str | Path) -> pl.DataFrame:
    """``qid Q0 docid rank score tag`` per line -> query_id, doc_id, rank, score.

    The rank column is kept as written; callers that need trec_eval semantics order
    by score (ties by doc id descending), not by this column. Ranks must fit Int32 and
    scores be finite.
    """
    qids, dids, ranks, scores = [], [], [], []
    seen: set[tuple[str, str]] = set()
    for number, line in text_lines(path):
        if not line.strip():
            continue
        where = f"line {number}"
        parts = line.split()
        if len(parts) != 6:
            raise InputFormatError(
                path, where, f"expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}: {cut(line)}"
                f"{sniff.hint(line, sniff.TREC_RUN, path)}"
            )
        qid, _, did, rank, score, _tag = parts
        try:
            rank_i = int(rank)
            score_f = float(score)
        except ValueError:
            raise InputFormatError(
                path, where, f"rank {cut(rank)} must be an integer and score {cut(score)} a number"
            ) from None
        check_int32(path, where, rank_i, "rank")
        check_finite(path, where, score_f, "score", score)
        check_id(path, where, qid, "query id")
        check_id(path, where, did, "document id")
        if (qid, did) in seen:
            raise InputFormatError(path, where, f"document {cut(did)} listed twice for query {cut(qid)}")
        seen.add((qid, did))
        qids.append(qid)
        dids.append(did)
        ranks.append(rank_i)
        scores.append(score_f)
    if not qids:
        raise InputFormatError(path, "whole file", f"no run lines found{sniff.file_hint(path, sniff.TREC_RUN)}")
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
