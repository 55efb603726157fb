"""TREC's SGML files: documents (``<DOC><DOCNO>``, as Anserini's TrecCollection reads them)
and classic topics (``<top><num>``).

Documents (corpus format ``trec``)::

    <DOC>
    <DOCNO> FBIS3-1 </DOCNO>
    <HEADLINE> A title </HEADLINE>
    <TEXT>
    The text, possibly over many lines.
    </TEXT>
    </DOC>

The id is the DOCNO's text. The document is the plain text of everything else inside
``<DOC>``: tags are dropped, entities (``&amp;``) decoded, each stretch of text between
tags stripped and the non-blank ones joined by a newline; there is no separate title
(Anserini indexes the same tag-stripped contents). A ``<DOC>`` may sit on one line.

Topics (topics format ``trec`` when the first non-blank line starts with ``<top``)::

    <top>
    <num> Number: 301
    <title> International Organized Crime
    <desc> Description:
    Identify organizations that participate in international criminal activity.
    <narr> Narrative:
    ...
    </top>

A field runs from its tag to the next tag; the ``Number:``, ``Topic:``, ``Description:``
and ``Narrative:`` labels are dropped. The query is the title unless ``field`` names
``desc`` or ``narr``.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Iterator

from presdep.contracts.errors import InputFormatError, cut
from presdep.data import sniff
from presdep.data.doc import Doc
from presdep.data.guards import check_id
from presdep.data.text_input import text_lines

_DOC_OPEN = re.compile(r"<DOC(?:\s[^>]*)?>", re.IGNORECASE)
_DOC_CLOSE = re.compile(r"</DOC>", re.IGNORECASE)
_DOCNO = re.compile(r"<DOCNO>(.*?)</DOCNO>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def _doc(path: Path, start: int, body: str) -> Doc:
    where = f"line {start}"
    docnos = _DOCNO.findall(body)
    if len(docnos) != 1:
        raise InputFormatError(path, where, f"the <DOC> starting here has {len(docnos)} <DOCNO>...</DOCNO>, "
                               "expected exactly one")
    doc_id = check_id(path, where, html.unescape(docnos[0]).strip(), "document id")
    if not doc_id:
        raise InputFormatError(path, where, "the <DOC> starting here has an empty <DOCNO>")
    rest = _DOCNO.sub(" ", body)
    parts = (html.unescape(p).strip() for p in _TAG.split(rest))
    return Doc(doc_id, "", "\n".join(p for p in parts if p))


def iter_trec_docs(path: str | Path) -> Iterator[Doc]:
    """The documents of a TREC SGML file (plain or .gz); duplicate ids are an error."""
    path = Path(path)
    seen: dict[str, int] = {}
    start, body = 0, []
    for number, line in text_lines(path):
        rest = line
        while rest:
            if not start:
                m = _DOC_OPEN.search(rest)
                before = rest[: m.start()] if m else rest
                if before.strip():
                    raise InputFormatError(path, f"line {number}", f"text outside <DOC>...</DOC>: {cut(before.strip())}"
                                           f"{sniff.hint(before, sniff.SGML_DOCS, path)}")
                if not m:
                    break
                start, rest = number, rest[m.end():]
                continue
            m, opened = _DOC_CLOSE.search(rest), _DOC_OPEN.search(rest)
            if opened and (not m or opened.start() < m.start()):
                raise InputFormatError(path, f"line {number}",
                                       f"a new <DOC> before the </DOC> of the one at line {start}")
            if not m:
                body.append(rest)
                break
            body.append(rest[: m.start()])
            doc = _doc(path, start, "\n".join(body))
            if doc.doc_id in seen:
                raise InputFormatError(path, f"line {start}", f"document id {cut(doc.doc_id)} appears twice "
                                       f"(first at line {seen[doc.doc_id]})")
            seen[doc.doc_id] = start
            yield doc
            start, body, rest = 0, [], rest[m.end():]
    if start:
        raise InputFormatError(path, f"line {start}", "this <DOC> has no </DOC> before the end of the file")
    if not seen:
        raise InputFormatError(path, "whole file", f"no <DOC> found{sniff.file_hint(path, sniff.SGML_DOCS)}")


_TOPIC_FIELD = re.compile(r"<(num|title|desc|narr)>", re.IGNORECASE)
_LABELS = {"num": "Number:", "title": "Topic:", "desc": "Description:", "narr": "Narrative:"}
FIELD_NAMES = {"title": "title", "desc": "desc", "description": "desc", "narr": "narr", "narrative": "narr"}


def _topic_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    pieces = _TOPIC_FIELD.split(text)
    for tag, value in zip(pieces[1::2], pieces[2::2]):
        tag = tag.lower()
        value = _TAG.sub(" ", value).strip()  # closing tags some files write (</title>)
        if value.lower().startswith(_LABELS[tag].lower()):
            value = value[len(_LABELS[tag]):].strip()
        fields[tag] = " ".join(value.split())
    return fields


def read_sgml_topics(path: str | Path, field: str | None = None) -> dict[str, str]:
    """{query_id: text} from classic TREC ``<top>`` blocks (see the module docstring)."""
    path = Path(path)
    key = FIELD_NAMES.get((field or "title").lower())
    if key is None:
        raise InputFormatError(path, "field", f"TREC topics have the fields title, desc and narr, not {cut(field)}")
    topics: dict[str, str] = {}
    start, body = 0, []
    for number, line in text_lines(path):
        low = line.strip().lower()
        if not start:
            if not low:
                continue
            if not low.startswith("<top>"):
                raise InputFormatError(path, f"line {number}", f"expected <top>, got {cut(line.strip())}"
                                       f"{sniff.hint(line, sniff.SGML_TOPICS, path)}")
            start, body = number, [line.strip()[5:]]
            continue
        if low.startswith("<top>"):
            raise InputFormatError(path, f"line {number}", f"a new <top> before the </top> of the one at line {start}")
        if low.startswith("</top>"):
            fields = _topic_fields("\n".join(body))
            where = f"line {start}"
            qid = fields.get("num", "")
            if not qid:
                raise InputFormatError(path, where, "the <top> starting here has no <num>")
            check_id(path, where, qid, "query id")
            if not fields.get(key):
                raise InputFormatError(path, where, f"topic {cut(qid)} has no (or an empty) <{key}>")
            if qid in topics:
                raise InputFormatError(path, where, f"query id {cut(qid)} appears twice")
            topics[qid] = fields[key]
            start = 0
            continue
        body.append(line)
    if start:
        raise InputFormatError(path, f"line {start}", "this <top> has no </top> before the end of the file")
    if not topics:
        raise InputFormatError(path, "whole file", "no topics found")
    return topics
