"""Response-ranking originals -> :class:`RankedQuery` (prompt = query, responses = documents).

Formats, as published (Hugging Face rows, read from Parquet/JSONL data files):

- ``rewardbench2``: ``allenai/reward-bench-2``: ``id``, ``prompt``, ``chosen: [str]``,
  ``rejected: [str]``, ``num_correct``, ``num_incorrect``, ``total_completions``, ``models``,
  ``subset``, ``additional_metadata``. Grade 1 = chosen, 0 = rejected.
- ``nectar``: ``berkeley-nest/Nectar``: ``prompt``, ``answers: [{answer, model, rank}]``,
  ``turns``, ``num_responses``, ``source``, ``good_natured``. The paper's pool of 500 sampled
  rows (:func:`nectar`); its deduplicated prompt list (catalogue ``population_queries``)
  then keeps 434. Grade from rank: 1 -> 3, 2-3 -> 2, 4-5 -> 1, 6-7 -> 0.
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

Every response gets a label-blind id and the first-stage order is ascending id, the order of
:func:`presdep.data.responses.label_blind_order` with the response's position as its key
(Nectar: the paper's seeded shuffle), so the given order (preferred first) never reaches the scorer.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from presdep.contracts.errors import InputFormatError
from presdep.data.fetch.common import RankedQuery, label_blind_id, need, read_rows
from presdep.data.responses import label_blind_order, read_responses

log = logging.getLogger(__name__)


def _blind(qid: str, prompt: str, texts: Sequence[str], grades: Sequence[int]) -> RankedQuery:
    ids = [label_blind_id(qid, i) for i in range(len(texts))]
    order = label_blind_order(qid, [str(i) for i in range(len(texts))])  # = ascending id
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


# The paper's Nectar pool: a seeded sample of the train split's rows, numbered before filtering.
NECTAR_POOL = {"rows": 500, "seed": 42, "responses": 7}
_HUMAN_TURN = re.compile(r"Human:\s*(.*?)\s*(?:\n\nAssistant:|\Z)", re.DOTALL)


def deframe_prompt(text: str) -> str:
    """The last Human turn of a Nectar prompt ("\\n\\nHuman: ...\\n\\nAssistant:"), whitespace-collapsed
    (the whole text when it has no Human turn)."""
    turns = _HUMAN_TURN.findall(text)
    return " ".join((turns[-1] if turns else text).split())


def nectar_grade(rank: int) -> int:
    """Nectar's rank (1 best .. 7) as a grade: 1 -> 3, 2-3 -> 2, 4-5 -> 1, 6-7 -> 0."""
    return 3 if rank == 1 else 2 if rank <= 3 else 1 if rank <= 5 else 0


def nectar(path: str | Path, rows: int = NECTAR_POOL["rows"], seed: int = NECTAR_POOL["seed"],
           responses: int = NECTAR_POOL["responses"]) -> Iterator[RankedQuery]:
    """The paper's Nectar pool (docs/methods/populations.md), so its deduplicated prompt list applies:

    ``random.Random(seed).sample`` of ``rows`` row indices of the split, sorted; the i-th sampled
    row is ``nectar-{i:06d}`` BEFORE any filter (a dropped row leaves a gap). A row is dropped
    unless it has exactly ``responses`` answers, a non-empty prompt, non-empty answer texts and
    ranks >= 1. The prompt is its last Human turn; texts are whitespace-collapsed; grade from
    rank (:func:`nectar_grade`). First-stage order: the answers shuffled by
    ``random.Random(int(sha1(qid)[:8], 16))`` (label-blind), ids ``{qid}-r01`` .. in that order.
    """
    table = [row for _, row in read_rows(path)]
    picked = range(len(table)) if rows >= len(table) else sorted(random.Random(seed).sample(range(len(table)), rows))
    dropped = 0
    for i, r in enumerate(picked):
        row, where = table[r], f"row {r}"
        need(path, where, row, ("prompt", "answers"), "prompt")
        qid = f"nectar-{i:06d}"
        answers = [a for a in (row["answers"] or []) if isinstance(a, dict)]
        prompt = deframe_prompt(str(row["prompt"]))
        pairs = [(" ".join(str(a.get("answer") or "").split()), int(a.get("rank") or 0)) for a in answers]
        if len(pairs) != responses or not prompt or any(not t or rank < 1 for t, rank in pairs):
            dropped += 1
            continue
        random.Random(int(hashlib.sha1(qid.encode()).hexdigest()[:8], 16)).shuffle(pairs)
        ids = [f"{qid}-r{pos:02d}" for pos in range(1, len(pairs) + 1)]
        n = len(pairs)
        yield RankedQuery(qid, prompt, [(d, t, float(n - j)) for j, (d, (t, _)) in enumerate(zip(ids, pairs))],
                          {d: nectar_grade(rank) for d, (_, rank) in zip(ids, pairs)})
    if dropped:
        log.info("%s: %d of %d sampled Nectar rows dropped (not %d non-empty ranked answers)", path, dropped,
                 len(picked), responses)


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
