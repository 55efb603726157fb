"""Multi-document QA originals -> :class:`QARecord` (then IRCoT JSONL).

Formats, as published:

- ``hotpotqa_hf``: Hugging Face ``hotpotqa/hotpot_qa`` (distractor) rows: ``id``, ``question``,
  ``answer``, ``type``, ``level``, ``supporting_facts: {title: [...], sent_id: [...]}``,
  ``context: {title: [...], sentences: [[...], ...]}``;
- ``hotpotqa_json`` / ``twowiki_json``: the original JSON list (HotpotQA's
  ``hotpot_dev_distractor_v1.json``; 2WikiMultihopQA's ``dev.json`` adds ``type`` and
  ``evidences``): ``_id``, ``question``, ``answer``, ``supporting_facts: [[title, sent_id]]``,
  ``context: [[title, [sentence, ...]]]``;
- ``musique_jsonl``: MuSiQue's ``musique_ans_v1.0_dev.jsonl``: ``id``, ``question``, ``answer``,
  ``answer_aliases``, ``answerable``, ``paragraphs: [{idx, title, paragraph_text, is_supporting}]``;
- ``ircot_jsonl``: IRCoT's processed JSONL (already the target format).

A paragraph's text is its sentences joined as the sources join them (HotpotQA: no separator).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from presdep.contracts.errors import InputFormatError
from presdep.data.fetch.common import QARecord, need, read_rows
from presdep.data.hotpotqa import _ircot_answers


def _supporting(path, where: str, titles: list[str], facts: list[str]) -> list[bool]:
    for t in facts:
        if t not in titles:
            raise InputFormatError(path, where, f"supporting fact title {t!r} is not a paragraph title")
    wanted = set(facts)
    return [t in wanted for t in titles]


def hotpotqa_hf(path: str | Path) -> Iterator[QARecord]:
    for where, row in read_rows(path):
        need(path, where, row, ("id", "question", "answer", "supporting_facts", "context"), "question")
        ctx, facts = row["context"], row["supporting_facts"]
        if not isinstance(ctx, dict) or set(ctx) < {"title", "sentences"}:
            raise InputFormatError(path, where, "'context' must be {title: [...], sentences: [[...]]}")
        if not isinstance(facts, dict) or "title" not in facts:
            raise InputFormatError(path, where, "'supporting_facts' must be {title: [...], sent_id: [...]}")
        titles = list(ctx["title"])
        texts = ["".join(s) for s in ctx["sentences"]]
        if len(titles) != len(texts):
            raise InputFormatError(path, where, f"{len(titles)} titles but {len(texts)} sentence lists")
        sup = _supporting(path, where, titles, list(facts["title"]))
        yield QARecord(str(row["id"]), str(row["question"]), [str(row["answer"])],
                       list(zip(titles, texts, sup)))


def hotpotqa_json(path: str | Path) -> Iterator[QARecord]:
    for where, row in read_rows(path):
        need(path, where, row, ("_id", "question", "answer", "supporting_facts", "context"), "question")
        ctx = row["context"]
        if not isinstance(ctx, list) or not all(isinstance(p, list) and len(p) == 2 for p in ctx):
            raise InputFormatError(path, where, "'context' must be a list of [title, [sentence, ...]]")
        titles = [str(p[0]) for p in ctx]
        texts = ["".join(p[1]) for p in ctx]
        facts = row["supporting_facts"]
        if not isinstance(facts, list) or not all(isinstance(f, list) and len(f) == 2 for f in facts):
            raise InputFormatError(path, where, "'supporting_facts' must be a list of [title, sentence id]")
        sup = _supporting(path, where, titles, [str(f[0]) for f in facts])
        yield QARecord(str(row["_id"]), str(row["question"]), [str(row["answer"])], list(zip(titles, texts, sup)))


twowiki_json = hotpotqa_json  # 2WikiMultihopQA follows HotpotQA's layout (plus type, evidences)


def musique_jsonl(path: str | Path) -> Iterator[QARecord]:
    """Answerable questions only (MuSiQue-Ans); answers = answer + answer_aliases."""
    for where, row in read_rows(path):
        need(path, where, row, ("id", "question", "answer", "paragraphs"), "question")
        if row.get("answerable") is False:
            continue
        paras = []
        for j, p in enumerate(row["paragraphs"]):
            need(path, f"{where} paragraphs[{j}]", p, ("title", "paragraph_text", "is_supporting"), "paragraph")
            paras.append((str(p["title"]), str(p["paragraph_text"]), bool(p["is_supporting"])))
        answers = [str(row["answer"])] + [str(a) for a in row.get("answer_aliases") or []]
        yield QARecord(str(row["id"]), str(row["question"]), answers, paras)


def ircot_jsonl(path: str | Path) -> Iterator[QARecord]:
    for where, row in read_rows(path):
        need(path, where, row, ("question_id", "question_text", "answers_objects", "contexts"), "question")
        paras = []
        for j, c in enumerate(row["contexts"]):
            need(path, f"{where} contexts[{j}]", c, ("title", "paragraph_text", "is_supporting"), "paragraph")
            paras.append((str(c["title"]), str(c["paragraph_text"]), bool(c["is_supporting"])))
        yield QARecord(str(row["question_id"]), str(row["question_text"]),
                       _ircot_answers(path, where, row["answers_objects"]), paras)


READERS = {"hotpotqa_hf": hotpotqa_hf, "hotpotqa_json": hotpotqa_json, "twowiki_json": twowiki_json,
           "musique_jsonl": musique_jsonl, "ircot_jsonl": ircot_jsonl}
