"""BEIR folders: ``qrels/<split>.tsv`` with a ``query-id corpus-id score`` header."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from presdep.contracts.errors import InputFormatError, cut
from presdep.data import sniff
from presdep.data.text_input import text_lines
from presdep.data.trec import qrels_frame


def beir_qrels_path(folder: str | Path, split: str = "test") -> Path:
    folder = Path(folder)
    return folder / "qrels" / f"{split}.tsv" if folder.is_dir() else folder


def read_beir_qrels(path: str | Path, split: str = "test") -> pl.DataFrame:
    """A BEIR folder (or its qrels TSV directly) -> the qrels contract (ids and grades checked
    as TREC qrels are, :func:`presdep.data.trec.qrels_frame`)."""
    path = beir_qrels_path(path, split)

    def rows():
        for number, line in text_lines(path):
            if not line.strip():
                continue
            parts = line.split("\t")
            if number == 1 and parts[0].strip().lower() in {"query-id", "query_id", "qid"}:
                continue  # the header
            if len(parts) != 3:
                raise InputFormatError(
                    path, f"line {number}",
                    f"expected 3 tab-separated columns 'query-id corpus-id score', got {cut(line)}"
                    f"{sniff.hint(line, sniff.BEIR_QRELS, path)}",
                )
            qid, did, score = (p.strip() for p in parts)
            yield number, qid, did, score

    return qrels_frame(path, rows())
