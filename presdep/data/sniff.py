"""What a line of a user file looks like, for the readers' error messages.

A reader that meets a line it cannot parse asks :func:`hint` what format the line looks
like; when that is another format than the one the reader expected, the message gains
"; this looks like X: use <key>: X". The common mix-ups this catches: a TREC run given as
rank_llm JSON or as qrels, TREC qrels given as topics, topics given as qrels, JSONL given as
tsv and back, SGML given as tab-separated text, BEIR qrels given as TREC qrels, and a BEIR
folder given where a file is read (:func:`folder_hint`).

The guesses are deliberately narrow (a run needs ``Q0`` or a numeric rank and score, qrels
integer grades): a wrong hint would be worse than none.
"""

from __future__ import annotations

import re
from pathlib import Path

TREC_RUN = "trec_run"
TREC_QRELS = "trec_qrels"
BEIR_QRELS = "beir_qrels"
TOPICS_TSV = "topics_tsv"  # id<TAB>text: Anserini topics, or a tsv corpus
JSONL = "jsonl"
JSON = "json"
SGML_DOCS = "sgml_docs"
SGML_TOPICS = "sgml_topics"

# What each guess says and which config format it points at.
ADVICE = {
    TREC_RUN: "a TREC run (qid Q0 docid rank score tag): use format: trec_run with run: {file}",
    TREC_QRELS: "TREC qrels (qid 0 docid grade): use it as qrels with format: trec",
    BEIR_QRELS: "BEIR qrels (query-id<TAB>corpus-id<TAB>score): use it as qrels with format: beir",
    TOPICS_TSV: "tab-separated id<TAB>text (topics or a passage collection): use format: tsv",
    JSONL: "JSON lines (one object per line): use format: jsonl",
    JSON: "a JSON document, not JSON lines (rank_llm's retrieve results are format: rank_llm_json with path: {file})",
    SGML_DOCS: "TREC SGML documents (<DOC><DOCNO>): use format: trec",
    SGML_TOPICS: "TREC SGML topics (<top><num>): use format: trec",
}

_INT = re.compile(r"^[+-]?\d+$")
_BEIR_HEADER = ("query-id", "query_id", "qid")


def is_int(text: str) -> bool:
    """A decimal integer as TREC files write one (grades, ranks)."""
    return bool(_INT.match(text))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def guess(line: str) -> str | None:
    """The format one line looks like (a key of :data:`ADVICE`), or None when unsure."""
    text = line.strip()
    if not text:
        return None
    low = text.lower()
    if low.startswith("<doc"):
        return SGML_DOCS
    if low.startswith("<top") or low.startswith("<num>"):
        return SGML_TOPICS
    if text.startswith("{"):
        return JSONL
    if text.startswith("["):
        return JSON
    cols = text.split()
    if len(cols) == 6 and (cols[1].upper() == "Q0" or (is_int(cols[3]) and _is_number(cols[4]))):
        return TREC_RUN
    if len(cols) == 4 and (is_int(cols[1]) or cols[1].upper() == "Q0") and is_int(cols[3]):  # DL19's qrels say Q0
        return TREC_QRELS
    tabs = text.split("\t")
    if len(tabs) == 3 and (tabs[0].strip().lower() in _BEIR_HEADER or is_int(tabs[2].strip())):
        return BEIR_QRELS
    if len(tabs) == 2 and tabs[0].strip() and tabs[1].strip():
        return TOPICS_TSV
    return None


def hint(line: str, expected: str | tuple[str, ...], path: str | Path | None = None) -> str:
    """"; this looks like X: use ..." when ``line`` looks like another format than ``expected``,
    else "" (``path``, the file the line is from, fills the advice's file name)."""
    got = guess(line)
    wanted = (expected,) if isinstance(expected, str) else expected
    if got is None or got in wanted:
        return ""
    return f"; this looks like {ADVICE[got].format(file=path if path is not None else '<file>')}"


def first_line(path: str | Path, max_lines: int = 1000) -> str:
    """The first non-blank line of a file ("" when unreadable or empty): what a whole-file error sniffs.

    Read on its own (bad bytes replaced, at most ``max_lines`` lines): this only words a hint,
    the readers' own rules (:mod:`presdep.data.text_input`) still decide what is an error.
    """
    p = Path(path)
    try:
        if p.suffix == ".gz":
            import gzip

            fh = gzip.open(p, "rb")
        else:
            fh = open(p, "rb")
        with fh:
            for number, raw in enumerate(fh):
                if number >= max_lines:
                    break
                line = raw[:4096].decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")
                if line.strip():
                    return line
    except (OSError, EOFError):
        return ""
    return ""


def file_hint(path: str | Path, expected: str | tuple[str, ...]) -> str:
    """:func:`hint` for the first non-blank line of ``path``."""
    return hint(first_line(path), expected, path)


BEIR_MARKERS = ("corpus.jsonl", "corpus.jsonl.gz", "queries.jsonl", "queries.jsonl.gz", "qrels")


def folder_hint(path: str | Path) -> str:
    """"; this looks like a BEIR folder: use format: beir" for a folder with BEIR's files, else ""."""
    p = Path(path)
    if any((p / name).exists() for name in BEIR_MARKERS):
        return "; this looks like a BEIR folder (corpus.jsonl, queries.jsonl, qrels/): use format: beir"
    return ""
