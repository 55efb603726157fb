"""HotpotQA (distractor setting) for multi-document QA: candidates, qrels, gold answers.

Two input formats, the ones users have:

* ``ircot_jsonl``: IRCoT's processed JSONL, one question per line:
  ``{"question_id", "question_text", "answers_objects": [{"number", "date":
  {"day", "month", "year"}, "spans": [...]}], "contexts": [{"id", "title",
  "paragraph_text", "is_supporting"}]}``.
* ``hotpotqa_json``: the original HotpotQA JSON (e.g. ``hotpot_dev_distractor_v1.json``),
  a list of ``{"_id", "question", "answer", "supporting_facts": [[title, sent_id]],
  "context": [[title, [sentence, ...]]]}``; a paragraph's text is its sentences
  concatenated as given (HotpotQA sentences carry their own leading spaces).

Mapping to the contracts: the question is the query; each paragraph is a
candidate with doc ``"title: text"`` and doc_id its position in the given list
(IRCoT's ``id``, which is that position); first_stage_rank is the given order
(1-based) and first_stage_score = n - rank + 1 (decreasing with rank, no other
meaning). Qrels: supporting paragraph = 1, every other paragraph = 0 (all
judged). Gold answers (``answers_gold``): one row per distinct gold string
(IRCoT: every span, else the number, else the date written "day month year").
A question may have fewer paragraphs than its source's usual 10 (HotpotQA's distractor
setting has a few); it keeps what it has. A paragraph text given twice in one question
is kept, counted and warned about once per file (:mod:`presdep.data.duplicates`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from presdep.contracts.errors import InputFormatError, InvalidInput
from presdep.data.duplicates import DuplicateTexts
from presdep.data.text_input import json_list, json_records

log = logging.getLogger(__name__)

FORMATS = ("ircot_jsonl", "hotpotqa_json")

_CAND_SCHEMA = {
    "query_id": pl.String, "query": pl.String, "doc_id": pl.String, "doc": pl.String,
    "first_stage_rank": pl.Int32, "first_stage_score": pl.Float64,
}
_QRELS_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}
_GOLD_SCHEMA = {"query_id": pl.String, "answer": pl.String}


class QASet(NamedTuple):
    """A QA collection in the three contracts: candidates, qrels, answers_gold."""

    candidates: pl.DataFrame
    qrels: pl.DataFrame
    gold: pl.DataFrame


class _Builder:
    def __init__(self, path: str | Path):
        self.path = path
        self.cands: dict[str, list] = {k: [] for k in _CAND_SCHEMA}
        self.qrels: dict[str, list] = {k: [] for k in _QRELS_SCHEMA}
        self.gold: dict[str, list] = {k: [] for k in _GOLD_SCHEMA}
        self.seen: set[str] = set()
        self.unsupported: list[str] = []
        self.duplicates = DuplicateTexts("paragraph")

    def add(self, where: str, qid: str, question: str, paragraphs: list[tuple[str, str, str, bool]], answers: list[str]):
        """``paragraphs``: (doc_id, title, text, supporting) in the given order."""
        if qid in self.seen:
            raise InputFormatError(self.path, where, f"question id {qid!r} appears twice")
        self.seen.add(qid)
        if not question.strip():
            raise InputFormatError(self.path, where, f"question {qid!r} has an empty question text")
        if not paragraphs:
            raise InputFormatError(self.path, where, f"question {qid!r} has no paragraphs")
        ids = [p[0] for p in paragraphs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InputFormatError(self.path, where, f"question {qid!r} has paragraph id {dup!r} twice")
        golds = list(dict.fromkeys(a.strip() for a in answers if a.strip()))
        if not golds:
            raise InputFormatError(self.path, where, f"question {qid!r} has no gold answer")
        n = len(paragraphs)
        docs = [f"{title.strip()}: {text.strip()}" if title.strip() else text.strip() for _, title, text, _ in paragraphs]
        self.duplicates.add(qid, docs)
        for rank, ((did, _, _, supporting), doc) in enumerate(zip(paragraphs, docs), start=1):
            self.cands["query_id"].append(qid)
            self.cands["query"].append(question.strip())
            self.cands["doc_id"].append(did)
            self.cands["doc"].append(doc)
            self.cands["first_stage_rank"].append(rank)
            self.cands["first_stage_score"].append(float(n - rank + 1))
            self.qrels["query_id"].append(qid)
            self.qrels["doc_id"].append(did)
            self.qrels["relevance"].append(1 if supporting else 0)
        if not any(p[3] for p in paragraphs):
            self.unsupported.append(qid)
        for g in golds:
            self.gold["query_id"].append(qid)
            self.gold["answer"].append(g)

    def finish(self) -> QASet:
        if not self.seen:
            raise InputFormatError(self.path, "whole file", "no questions found")
        if self.unsupported:
            log.warning(
                "%s: %d question(s) have no supporting paragraph and get no QA nDCG (e.g. %s)",
                self.path, len(self.unsupported), self.unsupported[0],
            )
        self.duplicates.warn(self.path)
        return QASet(
            pl.DataFrame(self.cands, schema=_CAND_SCHEMA),
            pl.DataFrame(self.qrels, schema=_QRELS_SCHEMA),
            pl.DataFrame(self.gold, schema=_GOLD_SCHEMA),
        )


def _need(path, where: str, obj: Any, fields: tuple[str, ...], what: str) -> None:
    if not isinstance(obj, dict):
        raise InputFormatError(path, where, f"expected a JSON object ({what}), got {type(obj).__name__}")
    missing = [f for f in fields if f not in obj]
    if missing:
        raise InputFormatError(path, where, f"{what} lacks field(s) {missing}; expected {list(fields)}")


def _str(path, where: str, value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InputFormatError(path, where, f"'{name}' must be a string, got {type(value).__name__}")
    return value


def _ircot_answers(path, where: str, objects: Any) -> list[str]:
    if not isinstance(objects, list) or not objects:
        raise InputFormatError(path, where, "'answers_objects' must be a non-empty list")
    out: list[str] = []
    for k, obj in enumerate(objects):
        w = f"{where} answers_objects[{k}]"
        if not isinstance(obj, dict):
            raise InputFormatError(path, w, "expected an object with 'spans', 'number', 'date'")
        spans = obj.get("spans") or []
        if not isinstance(spans, list) or not all(isinstance(s, str) for s in spans):
            raise InputFormatError(path, w, "'spans' must be a list of strings")
        if any(s.strip() for s in spans):
            out.extend(spans)
        elif str(obj.get("number") or "").strip():
            out.append(str(obj["number"]))
        elif isinstance(obj.get("date"), dict):
            d = obj["date"]
            out.append(" ".join(str(d.get(x) or "").strip() for x in ("day", "month", "year") if str(d.get(x) or "").strip()))
    return out


def read_hotpotqa_ircot(path: str | Path) -> QASet:
    """IRCoT's processed HotpotQA JSONL -> candidates, qrels, gold answers."""
    b = _Builder(path)
    for number, row in json_records(path):
        where = f"line {number}"
        _need(path, where, row, ("question_id", "question_text", "answers_objects", "contexts"), "question")
        qid = str(row["question_id"])
        question = _str(path, where, row["question_text"], "question_text")
        contexts = row["contexts"]
        if not isinstance(contexts, list):
            raise InputFormatError(path, where, "'contexts' must be a list of paragraphs")
        paragraphs = []
        for j, ctx in enumerate(contexts):
            w = f"{where} contexts[{j}]"
            _need(path, w, ctx, ("id", "title", "paragraph_text", "is_supporting"), "paragraph")
            if not isinstance(ctx["is_supporting"], bool):
                raise InputFormatError(path, w, f"'is_supporting' must be true or false, got {ctx['is_supporting']!r}")
            paragraphs.append((
                str(ctx["id"]),
                _str(path, w, ctx["title"], "title"),
                _str(path, w, ctx["paragraph_text"], "paragraph_text"),
                ctx["is_supporting"],
            ))
        b.add(where, qid, question, paragraphs, _ircot_answers(path, where, row["answers_objects"]))
    return b.finish()


def read_hotpotqa_json(path: str | Path) -> QASet:
    """The original HotpotQA JSON (distractor or gold-paragraph files) -> the three contracts."""
    entries = json_list(path, "questions")
    b = _Builder(path)
    for i, row in enumerate(entries):
        where = f"entry {i}"
        _need(path, where, row, ("_id", "question", "answer", "supporting_facts", "context"), "question")
        qid = str(row["_id"])
        where = f"entry {i} (_id {qid})"
        question = _str(path, where, row["question"], "question")
        answer = _str(path, where, row["answer"], "answer")
        context = row["context"]
        if not isinstance(context, list):
            raise InputFormatError(path, where, "'context' must be a list of [title, [sentences]]")
        paragraphs, titles = [], []
        for j, par in enumerate(context):
            w = f"{where} context[{j}]"
            if (not isinstance(par, list) or len(par) != 2 or not isinstance(par[0], str)
                    or not isinstance(par[1], list) or not all(isinstance(s, str) for s in par[1])):
                raise InputFormatError(path, w, "expected [title, [sentence, ...]]")
            titles.append(par[0])
            paragraphs.append([str(j), par[0], "".join(par[1]), False])
        facts = row["supporting_facts"]
        if not isinstance(facts, list):
            raise InputFormatError(path, where, "'supporting_facts' must be a list of [title, sentence id]")
        for k, fact in enumerate(facts):
            if not isinstance(fact, list) or len(fact) != 2 or not isinstance(fact[0], str):
                raise InputFormatError(path, f"{where} supporting_facts[{k}]", "expected [title, sentence id]")
            if fact[0] not in titles:
                raise InputFormatError(
                    path, f"{where} supporting_facts[{k}]", f"title {fact[0]!r} is not a paragraph title of the question"
                )
            for p in paragraphs:
                if p[1] == fact[0]:
                    p[3] = True
        b.add(where, qid, question, [tuple(p) for p in paragraphs], [answer])
    return b.finish()


def read_hotpotqa(path: str | Path, fmt: str = "ircot_jsonl") -> QASet:
    """Dispatch on the config's candidates format name."""
    if fmt == "ircot_jsonl":
        return read_hotpotqa_ircot(path)
    if fmt == "hotpotqa_json":
        return read_hotpotqa_json(path)
    raise InvalidInput(f"unknown HotpotQA format {fmt!r}; expected one of {FORMATS}")


__all__ = ["QASet", "FORMATS", "read_hotpotqa", "read_hotpotqa_ircot", "read_hotpotqa_json"]
