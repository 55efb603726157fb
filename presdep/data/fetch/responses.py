"""Response-ranking originals -> :class:`RankedQuery` (prompt = query, responses = documents).

Formats, as published (Hugging Face rows, read from Parquet/JSONL data files):

- ``rewardbench2``: ``allenai/reward-bench-2``: ``id``, ``prompt``, ``chosen: [str]``,
  ``rejected: [str]``, ``num_correct``, ``num_incorrect``, ``total_completions``, ``models``,
  ``subset``, ``additional_metadata``. Grade 1 = chosen, 0 = rejected.
- ``nectar``: ``berkeley-nest/Nectar``: ``prompt``, ``answers: [{answer, model, rank}]``,
  ``turns``, ``num_responses``, ``source``, ``good_natured``. Deduplicated: a prompt text seen
  before is dropped, and so is a repeated answer text within a prompt (the better-ranked copy
  stays). Grade = (number of answers) - rank, so rank 1 of 7 gets 6.
- ``ppe``: ``lmarena-ai/PPE-*-Best-of-K``: ``question_id``, ``prompt``, ``response_1`` ...
  ``response_32``, ``scores: [bool]`` (correctness of response_i). The first K responses;
  grade 1 = correct.
- ``rm_bench_json``: RM-Bench's JSON list ``{id, prompt, chosen: [3], rejected: [3]}``;
  the existing reader (:mod:`presdep.data.responses`) gives ids, order and grades.
- ``ultrafeedback``: ``openbmb/UltraFeedback``: ``source``, ``instruction``, ``models``,
  ``completions: [{model, principle, custom_system_prompt, response, annotations, critique,
  fine-grained_score, overall_score}]``, ``correct_answers``, ``incorrect_answers``. Grade =
  number of thresholds (4, 6, 8) at or below ``overall_score``. The prompt id is the sha256
  of the instruction (the rows carry none).

Every response gets a label-blind id and the first-stage order is ascending id, so the
given order (preferred first) never reaches the scorer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from presdep.contracts.errors import InputFormatError
from presdep.data.fetch.common import RankedQuery, label_blind_id, need, read_rows
from presdep.data.responses import read_responses


def _blind(qid: str, prompt: str, texts: Sequence[str], grades: Sequence[int]) -> RankedQuery:
    ids = [label_blind_id(qid, i) for i in range(len(texts))]
    order = sorted(range(len(texts)), key=lambda i: ids[i])
    n = len(order)
    return RankedQuery(qid, prompt, [(ids[i], texts[i], float(n - r)) for r, i in enumerate(order)],
                       {ids[i]: int(grades[i]) for i in order})


def rewardbench2(path: str | Path) -> Iterator[RankedQuery]:
    for where, row in read_rows(path):
        need(path, where, row, ("id", "prompt", "chosen", "rejected"), "prompt")
        chosen, rejected = list(row["chosen"] or []), list(row["rejected"] or [])
        if not chosen or not rejected:
            raise InputFormatError(path, where, "needs at least one chosen and one rejected response")
        yield _blind(str(row["id"]), str(row["prompt"]), chosen + rejected, [1] * len(chosen) + [0] * len(rejected))


def nectar(path: str | Path) -> Iterator[RankedQuery]:
    seen_prompts: set[str] = set()
    for where, row in read_rows(path):
        need(path, where, row, ("prompt", "answers"), "prompt")
        prompt = str(row["prompt"])
        if prompt in seen_prompts:
            continue
        seen_prompts.add(prompt)
        answers = []
        for j, a in enumerate(row["answers"]):
            need(path, f"{where} answers[{j}]", a, ("answer", "rank"), "answer")
            answers.append((float(a["rank"]), str(a["answer"])))
        answers.sort(key=lambda x: x[0])  # better rank first, so a duplicate keeps its best rank
        texts, ranks, kept = [], [], set()
        for rank, text in answers:
            if text not in kept:
                kept.add(text)
                texts.append(text)
                ranks.append(rank)
        if len(texts) < 2:
            continue
        levels = sorted(set(ranks))
        grades = [len(levels) - 1 - levels.index(r) for r in ranks]
        qid = hashlib.sha256(prompt.encode()).hexdigest()[:16]
        yield _blind(qid, prompt, texts, grades)


def ppe(path: str | Path, k: int = 8) -> Iterator[RankedQuery]:
    for where, row in read_rows(path):
        need(path, where, row, ("question_id", "prompt", "scores", *(f"response_{i}" for i in range(1, k + 1))), "prompt")
        scores = list(row["scores"])
        if len(scores) < k:
            raise InputFormatError(path, where, f"'scores' has {len(scores)} entries, fewer than the {k} responses used")
        texts = [str(row[f"response_{i}"]) for i in range(1, k + 1)]
        yield _blind(str(row["question_id"]), str(row["prompt"]), texts, [1 if s else 0 for s in scores[:k]])


def rm_bench_json(path: str | Path) -> Iterator[RankedQuery]:
    cands, qrels = read_responses(path, "rm_bench_json")[:2]
    grades: dict[str, dict[str, int]] = {}
    for q, d, r in qrels.select("query_id", "doc_id", "relevance").iter_rows():
        grades.setdefault(q, {})[d] = int(r)
    for (qid,), group in cands.sort(["query_id", "first_stage_rank"]).group_by(["query_id"], maintain_order=True):
        docs = [(d, t, float(s)) for d, t, s in group.select("doc_id", "doc", "first_stage_score").iter_rows()]
        yield RankedQuery(str(qid), str(group["query"][0]), docs, grades.get(qid, {}))


def ultrafeedback(path: str | Path, thresholds: Sequence[float] = (4, 6, 8)) -> Iterator[RankedQuery]:
    for where, row in read_rows(path):
        need(path, where, row, ("instruction", "completions"), "prompt")
        texts, grades = [], []
        for j, c in enumerate(row["completions"]):
            need(path, f"{where} completions[{j}]", c, ("response", "overall_score"), "completion")
            score = float(c["overall_score"])
            texts.append(str(c["response"]))
            grades.append(sum(score >= t for t in thresholds))
        if len(texts) < 2:
            continue
        prompt = str(row["instruction"])
        yield _blind(hashlib.sha256(prompt.encode()).hexdigest()[:16], prompt, texts, grades)


READERS = {"rewardbench2": rewardbench2, "nectar": nectar, "ppe": ppe, "rm_bench_json": rm_bench_json,
           "ultrafeedback": ultrafeedback}
