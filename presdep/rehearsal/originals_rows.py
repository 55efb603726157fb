"""Rows for the rehearsal's synthetic originals: QA sets and response sets, with their Parquet schemas.

QA: HotpotQA (Hugging Face), 2WikiMultihopQA, MuSiQue. Responses: RewardBench 2, Nectar, PPE,
UltraFeedback, RM-Bench. Claims: Climate-FEVER's verdicts (Hugging Face).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from presdep.rehearsal.originals_text import FILLER, VERBS, Vocab, hex_id, keyed_text, sentence

# --------------------------------------------------------------------------- QA rows


def _sentences(rng: random.Random, keys: Sequence[str], n: int) -> list[str]:
    """HotpotQA's sentence lists: sentences after the first keep their leading space."""
    out = []
    for i in range(n):
        s = sentence(rng, [keys[i]] if i < len(keys) else [], rng.randint(4, 8))
        out.append(s if i == 0 else " " + s)
    return out


@dataclass
class _Question:
    qid: str
    question: str
    answer: str
    bridge: str
    titles: list[str]
    sentences: list[list[str]]
    supporting: list[int]  # paragraph positions


def _question(rng: random.Random, vocab: Vocab, qid: str, paragraphs: int, supporting: int) -> _Question:
    titles = [vocab.title() for _ in range(paragraphs)]
    sup = sorted(rng.sample(range(paragraphs), supporting))
    answer, bridge = vocab.word().capitalize(), vocab.word()
    sentences = []
    for i in range(paragraphs):
        keys = [titles[i]]
        if i == sup[0]:
            keys.append(bridge)
        if i == sup[-1]:
            keys += [bridge, answer]
        sentences.append(_sentences(rng, keys, rng.randint(max(2, len(keys)), 4)))
    question = f"Which {rng.choice(FILLER)} {rng.choice(VERBS)} the {bridge} of {titles[sup[0]]}?"
    return _Question(qid, question, answer, bridge, titles, sentences, sup)


def hotpotqa_rows(rng: random.Random, vocab: Vocab, n: int, paragraphs: int, supporting: int) -> list[dict]:
    rows = []
    for _ in range(n):
        q = _question(rng, vocab, "5a" + hex_id(rng, 22), paragraphs, supporting)
        facts_t, facts_s = [], []
        for p in q.supporting:
            for s in sorted(rng.sample(range(len(q.sentences[p])), rng.randint(1, 2))):
                facts_t.append(q.titles[p])
                facts_s.append(s)
        rows.append({"id": q.qid, "question": q.question, "answer": q.answer,
                     "type": rng.choice(("bridge", "comparison")), "level": rng.choice(("easy", "medium", "hard")),
                     "supporting_facts": {"title": facts_t, "sent_id": facts_s},
                     "context": {"title": q.titles, "sentences": q.sentences}})
    return rows


HOTPOTQA_SCHEMA = pa.schema([
    ("id", pa.string()), ("question", pa.string()), ("answer", pa.string()), ("type", pa.string()),
    ("level", pa.string()),
    ("supporting_facts", pa.struct([("title", pa.list_(pa.string())), ("sent_id", pa.list_(pa.int32()))])),
    ("context", pa.struct([("title", pa.list_(pa.string())), ("sentences", pa.list_(pa.list_(pa.string())))])),
])


def twowiki_rows(rng: random.Random, vocab: Vocab, n: int, paragraphs: int, supporting: int) -> list[dict]:
    rows = []
    for _ in range(n):
        q = _question(rng, vocab, hex_id(rng, 32), paragraphs, supporting)
        a, b = q.supporting[0], q.supporting[-1]
        rows.append({"_id": q.qid, "type": rng.choice(("compositional", "comparison", "inference")),
                     "question": q.question, "answer": q.answer,
                     "context": [[t, s] for t, s in zip(q.titles, q.sentences)],
                     "supporting_facts": [[q.titles[p], 0] for p in q.supporting],
                     "evidences": [[q.titles[a], q.bridge, q.titles[b]], [q.titles[b], q.bridge, q.answer]]})
    return rows


def musique_rows(rng: random.Random, vocab: Vocab, n: int, paragraphs: int, supporting: int) -> list[dict]:
    rows = []
    for _ in range(n):
        hops = [rng.randrange(10_000, 900_000) for _ in range(supporting)]
        q = _question(rng, vocab, f"{supporting}hop__" + "_".join(map(str, hops)), paragraphs, supporting)
        decomposition = [{"id": h, "question": f"{q.titles[p]} >> {q.bridge}" if i == 0 else f"#{i} >> {q.bridge}",
                          "answer": q.answer if i == supporting - 1 else q.titles[q.supporting[i + 1]],
                          "paragraph_support_idx": p}
                         for i, (h, p) in enumerate(zip(hops, q.supporting))]
        rows.append({"id": q.qid, "question": q.question, "answer": q.answer, "answer_aliases": [q.answer.lower()],
                     "answerable": True, "question_decomposition": decomposition,
                     "paragraphs": [{"idx": i, "title": t, "paragraph_text": "".join(s), "is_supporting": i in q.supporting}
                                    for i, (t, s) in enumerate(zip(q.titles, q.sentences))]})
    return rows


# --------------------------------------------------------------------------- response rows


def _prompt(rng: random.Random, vocab: Vocab) -> tuple[str, list[str]]:
    keys = vocab.words(2)
    return f"Explain how the {keys[0]} {rng.choice(FILLER)} relates to {keys[1]} in a {rng.choice(FILLER)}.", keys


def _response(rng: random.Random, keys: Sequence[str], good: bool, n: int) -> str:
    head = f"The {keys[0]} {'relates to' if good else 'has nothing to do with'} {keys[-1]}. "
    return head + keyed_text(rng, list(keys) if good else [], n)


_MODELS = ("gpt-4-0613", "claude-2", "llama-2-70b-chat", "mistral-7b-instruct", "vicuna-33b", "gpt-3.5-turbo",
           "wizardlm-13b", "tulu-2-dpo-70b")


def rewardbench2_rows(rng: random.Random, vocab: Vocab, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        prompt, keys = _prompt(rng, vocab)
        rows.append({"id": str(i), "prompt": prompt, "chosen": [_response(rng, keys, True, 3)],
                     "rejected": [_response(rng, keys, False, rng.randint(2, 4)) for _ in range(3)],
                     "num_correct": 1, "num_incorrect": 3, "total_completions": 4, "models": rng.sample(_MODELS, 4),
                     "subset": rng.choice(("Factuality", "Precise IF", "Math", "Safety", "Focus")),
                     "additional_metadata": {"category": None}})
    return rows


REWARDBENCH2_SCHEMA = pa.schema([
    ("id", pa.string()), ("prompt", pa.string()), ("chosen", pa.list_(pa.string())), ("rejected", pa.list_(pa.string())),
    ("num_correct", pa.int64()), ("num_incorrect", pa.int64()), ("total_completions", pa.int64()),
    ("models", pa.list_(pa.string())), ("subset", pa.string()), ("additional_metadata", pa.struct([("category", pa.string())])),
])


def nectar_rows(rng: random.Random, vocab: Vocab, n: int, responses: int = 7) -> list[dict]:
    rows = []
    for _ in range(n):
        prompt, keys = _prompt(rng, vocab)
        answers = [{"answer": _response(rng, keys, r <= 3, 5 - min(r, 4)), "model": m, "rank": float(r)}
                   for r, m in zip(range(1, responses + 1), rng.sample(_MODELS, responses))]
        rows.append({"prompt": f"\n\nHuman: {prompt}\n\nAssistant:", "answers": answers, "turns": 1,
                     "num_responses": responses, "source": ["sharegpt"], "good_natured": True})
    return rows


NECTAR_SCHEMA = pa.schema([
    ("prompt", pa.string()),
    ("answers", pa.list_(pa.struct([("answer", pa.string()), ("model", pa.string()), ("rank", pa.float64())]))),
    ("turns", pa.int64()), ("num_responses", pa.int64()), ("source", pa.list_(pa.string())), ("good_natured", pa.bool_()),
])

PPE_RESPONSES = 32  # the Best-of-K sets publish 32 responses per prompt


def ppe_rows(rng: random.Random, vocab: Vocab, n: int, k: int, mmlu_pro: bool) -> list[dict]:
    total = max(PPE_RESPONSES, k)
    rows = []
    for i in range(n):
        prompt, keys = _prompt(rng, vocab)
        scores = [rng.random() < 0.5 for _ in range(total)]
        scores[0], scores[1] = True, False  # both labels among the first K
        rng.shuffle(scores)
        while len(set(scores[:k])) < 2:
            rng.shuffle(scores)
        row: dict[str, Any] = {"question_id": f"{'mmlu-pro' if mmlu_pro else 'math'}-{i:05d}", "prompt": prompt,
                               "model_name": rng.choice(_MODELS), "scores": scores,
                               "mean_score": sum(scores) / total}
        if mmlu_pro:
            options = [vocab.word() for _ in range(4)]
            answer = rng.randrange(4)
            row.update(question=prompt, options=options, answer="ABCD"[answer], answer_index=answer,
                       category=rng.choice(("math", "law", "physics", "history")),
                       parsed_outputs=["ABCD"[answer] if s else "ABCD"[(answer + 1) % 4] for s in scores])
        else:
            row.update(ground_truth=keys[0])
        for j in range(1, total + 1):
            row[f"response_{j}"] = _response(rng, keys, scores[j - 1], 2)
        rows.append(row)
    return rows


def ppe_schema(k: int, mmlu_pro: bool) -> pa.Schema:
    fields = [("question_id", pa.string()), ("prompt", pa.string()), ("model_name", pa.string()),
              ("scores", pa.list_(pa.bool_())), ("mean_score", pa.float64())]
    if mmlu_pro:
        fields += [("question", pa.string()), ("options", pa.list_(pa.string())), ("answer", pa.string()),
                   ("answer_index", pa.int64()), ("category", pa.string()), ("parsed_outputs", pa.list_(pa.string()))]
    else:
        fields += [("ground_truth", pa.string())]
    fields += [(f"response_{j}", pa.string()) for j in range(1, max(PPE_RESPONSES, k) + 1)]
    return pa.schema(fields)


_UF_ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")


def ultrafeedback_rows(rng: random.Random, vocab: Vocab, n: int, thresholds: Sequence[float]) -> list[dict]:
    # Scores on both sides of every threshold, so every grade occurs.
    levels = sorted({float(t) - 0.5 for t in thresholds} | {float(t) for t in thresholds} | {float(max(thresholds)) + 1})
    rows = []
    for _ in range(n):
        prompt, keys = _prompt(rng, vocab)
        models = rng.sample(_MODELS, 4)
        completions = []
        for m in models:
            score = rng.choice(levels)
            rating = str(max(1, min(5, round(score / 2))))
            completions.append({
                "annotations": {a: {"Rating": rating, "Rationale": sentence(rng)} for a in _UF_ASPECTS},
                "critique": sentence(rng), "custom_system_prompt": "", "fine-grained_score": float(rating),
                "model": m, "overall_score": score, "principle": rng.choice(("helpfulness", "honesty", "truthfulness")),
                "response": _response(rng, keys, score >= thresholds[0], 2)})
        rows.append({"source": rng.choice(("evol_instruct", "sharegpt", "flan_v2_niv2", "ultrachat")),
                     "instruction": prompt, "models": models, "completions": completions,
                     "correct_answers": ["None"], "incorrect_answers": ["None"]})
    return rows


_RATED = pa.struct([("Rating", pa.string()), ("Rationale", pa.string())])
ULTRAFEEDBACK_SCHEMA = pa.schema([
    ("source", pa.string()), ("instruction", pa.string()), ("models", pa.list_(pa.string())),
    ("completions", pa.list_(pa.struct([
        ("annotations", pa.struct([(a, _RATED) for a in _UF_ASPECTS])), ("critique", pa.string()),
        ("custom_system_prompt", pa.string()), ("fine-grained_score", pa.float64()), ("model", pa.string()),
        ("overall_score", pa.float64()), ("principle", pa.string()), ("response", pa.string())]))),
    ("correct_answers", pa.list_(pa.string())), ("incorrect_answers", pa.list_(pa.string())),
])


def rm_bench_rows(rng: random.Random, vocab: Vocab, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        prompt, keys = _prompt(rng, vocab)
        error = vocab.word()
        good = [_response(rng, keys, True, m) for m in (1, 3, 2)]  # concise, detailed, markdown
        good[2] = "**" + good[2].replace(". ", ".\n\n- ", 1) + "**"
        bad = [g.replace(keys[-1], error).replace(keys[-1].capitalize(), error.capitalize()) for g in good]
        rows.append({"id": 8 + 3 * i, "subset": "alpacaeval", "prompt": prompt, "chosen": good, "rejected": bad,
                     "error_key": error, "error": f"The answer should name {keys[-1]}, not {error}."})
    return rows



# --------------------------------------------------------------------------- claim rows


# Climate-FEVER's ClassLabel orders on the hub: claims have four classes, evidences three.
CLAIM_CLASSES = ("SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED")
_EVIDENCE_CLASSES = CLAIM_CLASSES[:3]
_EVIDENCES_PER_CLAIM = 5  # the release keeps five evidence sentences per claim
_VOTES = 5  # annotator slots per evidence; unfilled slots are null


def _claim_labels(rng: random.Random, n: int) -> list[int]:
    """Class indexes for ``n`` claims: every class at least once when ``n >= 4``, distinct below."""
    labels = list(range(len(CLAIM_CLASSES))) + [rng.randrange(len(CLAIM_CLASSES)) for _ in range(n - 4)]
    rng.shuffle(labels)
    return labels[:n]


def _evidence_labels(rng: random.Random, claim_label: int) -> list[int]:
    """Evidence verdicts that agree with the claim's: DISPUTED has both a support and a refutation."""
    wanted = {0: [0], 1: [1], 2: [], 3: [0, 1]}[claim_label]
    # The rest: neutral, or more of the same; a NOT_ENOUGH_INFO claim has no deciding evidence.
    rest = {0: (0, 2), 1: (1, 2), 2: (2,), 3: (0, 1, 2)}[claim_label]
    labels = wanted + [rng.choice(rest) for _ in range(_EVIDENCES_PER_CLAIM - len(wanted))]
    rng.shuffle(labels)
    return labels


def _votes(rng: random.Random, label: int) -> tuple[list[str | None], float]:
    """Annotators' votes (the majority is ``label``) and their entropy in bits, as the release gives."""
    cast = rng.randint(2, _VOTES)
    majority = cast // 2 + 1
    names = [_EVIDENCE_CLASSES[label]] * majority + [rng.choice(_EVIDENCE_CLASSES) for _ in range(cast - majority)]
    rng.shuffle(names)
    counts = Counter(names).values()
    entropy = -sum(c / cast * math.log2(c / cast) for c in counts)
    return names + [None] * (_VOTES - cast), abs(entropy)  # abs: no -0.0 for a unanimous vote


def climate_fever_rows(rng: random.Random, vocab: Vocab, claims: Mapping[str, str]) -> list[dict]:
    """One row per claim (``claims``: claim id -> claim text), in id order as given."""
    rows = []
    for (claim_id, claim), label in zip(claims.items(), _claim_labels(rng, len(claims))):
        evidences = []
        for ev_label in _evidence_labels(rng, label):
            article = vocab.title().replace(" ", "_")
            votes, entropy = _votes(rng, ev_label)
            evidences.append({"evidence_id": f"{article}:{rng.randrange(200)}", "evidence_label": ev_label,
                              "article": article, "evidence": sentence(rng, [article.replace("_", " ")]),
                              "entropy": entropy, "votes": votes})
        rows.append({"claim_id": claim_id, "claim": claim, "claim_label": label, "evidences": evidences})
    return rows


CLIMATE_FEVER_SCHEMA = pa.schema([
    ("claim_id", pa.string()), ("claim", pa.string()), ("claim_label", pa.int64()),
    ("evidences", pa.list_(pa.struct([
        ("evidence_id", pa.string()), ("evidence_label", pa.int64()), ("article", pa.string()),
        ("evidence", pa.string()), ("entropy", pa.float32()), ("votes", pa.list_(pa.string()))]))),
])
