"""BEIR folders: ``qrels/<split>.tsv`` with a ``query-id corpus-id score`` header."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from presdep.data.errors import InputFormatError, text_lines


def beir_qrels_path(folder: str | Path, split: str = "test") -> Path:
    folder = Path(folder)
    return folder / "qrels" / f"{split}.tsv" if folder.is_dir() else folder


def read_beir_qrels(path: str | Path, split: str = "test") -> pl.DataFrame:
    """A BEIR folder (or its qrels TSV directly) -> the qrels contract."""
    path = beir_qrels_path(path, split)
    qids, dids, rels = [], [], []
    seen: set[tuple[str, str]] = set()
    for number, line in text_lines(path):
        if not line.strip():
            continue
        parts = line.split("\t")
        if number == 1 and parts[0].strip().lower() in {"query-id", "query_id", "qid"}:
            continue  # the header
        if len(parts) != 3:
            raise InputFormatError(path, f"line {number}", f"expected 3 tab-separated columns 'query-id corpus-id score', got {line[:80]!r}")
        qid, did, score = (p.strip() for p in parts)
        try:
            rel = int(score)
        except ValueError:
            raise InputFormatError(path, f"line {number}", f"score {score!r} is not an integer") from None
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
