"""Small deterministic synthetic sets for the QA and response-ranking columns.

Written in the same real formats users bring, so the fixture goes through the
real loaders:

* QA (``task: qa``) -> ``<out>/<split>/questions.jsonl`` in IRCoT's HotpotQA
  format (read by :func:`presdep.data.hotpotqa.read_hotpotqa_ircot`). Each
  question is a two-hop bridge question about invented entities; exactly two
  supporting paragraphs, neither answering alone, combine into the answer
  (e.g. "Velmora Trading was founded by Kaelo Brun." + "Kaelo Brun was born in
  the town of Drisk." -> "In which town was the founder of Velmora Trading
  born?" -> "Drisk"). The other paragraphs are distractors in the same templates
  about other entities, including one that states the asked attribute of a
  different entity (a plausible wrong answer). Paragraph order is shuffled.
* Response ranking (``task: response``) -> ``<out>/<split>/responses.jsonl`` in
  the generic ``{id, prompt, responses, ranks}`` format (read by
  :func:`presdep.data.responses.read_response_jsonl`). Prompts are small
  arithmetic, unit and spelling questions with a checkable answer; each gets
  4 to ``candidates`` (at most 6) responses from fixed quality levels with a
  clear order: 1 correct with a short explanation, 2 correct and terse,
  3 explains the method without answering, 4 a confident wrong answer,
  5 a refusal or an off-topic reply (tied). The correct explained response and
  at least one response of rank >= 4 are always present; order is shuffled.

Everything derives from the spec's integer seed (one child generator per
split, so changing one split's size leaves the others unchanged): identical
files on every machine, no external data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_text_atomic

SPLITS = ("train", "heldout", "test")
TASK_FILES = {"qa": "questions.jsonl", "response": "responses.jsonl"}

_ON = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "st", "tr"]
_VO = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
_CO = ["", "n", "r", "l", "s", "x", "nd", "sk", "th"]
_JOBS = ["glassblower", "cartographer", "beekeeper", "clockmaker", "ferry pilot", "printer", "astronomer", "tanner"]
_INSTRUMENTS = ["viola", "oboe", "harp", "bassoon", "lute", "cornet", "zither", "cello"]
_SUFFIX = ["Trading", "Ironworks", "Shipping", "Press", "Mills", "Brewery"]


def _word(rng: np.random.Generator, syllables: int) -> str:
    parts = [str(rng.choice(_ON)) + str(rng.choice(_VO)) for _ in range(syllables)]
    return ("".join(parts) + str(rng.choice(_CO))).capitalize()


class _Names:
    """Distinct invented names per split."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def _fresh(self, make) -> str:
        while True:
            name = make()
            if name not in self.used:
                self.used.add(name)
                return name

    def person(self) -> str:
        return self._fresh(lambda: f"{_word(self.rng, 2)} {_word(self.rng, int(self.rng.integers(1, 3)))}")

    def place(self) -> str:
        return self._fresh(lambda: _word(self.rng, int(self.rng.integers(2, 4))))

    def company(self) -> str:
        return self._fresh(lambda: f"{_word(self.rng, 2)} {self.rng.choice(_SUFFIX)}")


# Bridge question types: (question, first-hop paragraph, second-hop paragraph).
# {a} = the entity asked about, {b} = the bridge entity, {v} = the answer.
_BRIDGES = {
    "founder_birthplace": (
        "In which town was the founder of {a} born?",
        "{a} is a family business that was founded by {b} and still trades today.",
        "{b} was a {job} who was born in the town of {v} and later travelled widely.",
    ),
    "teacher_instrument": (
        "Which instrument did the teacher of {a} play?",
        "{a} was a composer who studied music for many years under {b}.",
        "{b} played the {v} in several touring ensembles and taught in the capital.",
    ),
    "birthplace_river": (
        "On which river lies the town where {a} was born?",
        "{a} was a {job} who was born in the town of {b}.",
        "{b} is a small market town that lies on the banks of the {v} river.",
    ),
}
_FILLERS = [
    "Few records of this period survive.",
    "The account was later retold in a regional almanac.",
    "Local archives hold several letters on the subject.",
    "A short biography appeared decades later.",
]


@dataclass(frozen=True)
class SyntheticTaskSpec:
    task: str  # "qa" or "response"
    seed: int = 17
    queries: dict = field(default_factory=lambda: {"test": 8})  # split -> number of questions/prompts
    candidates: int = 10  # paragraphs per question (qa) / at most this many responses (response, 4..6)

    def __post_init__(self) -> None:
        if self.task not in TASK_FILES:
            raise InvalidInput(f"synthetic task {self.task!r} not in {sorted(TASK_FILES)}")
        bad = set(self.queries) - set(SPLITS)
        if bad:
            raise InvalidInput(f"unknown split(s) {sorted(bad)}; expected {SPLITS}")
        if self.task == "qa" and self.candidates < 4:
            raise InvalidInput("a synthetic QA question needs at least 4 paragraphs (2 supporting + distractors)")
        if self.task == "response" and not 4 <= self.candidates <= 6:
            raise InvalidInput("synthetic response sets have 4 to 6 responses per prompt: candidates must be 4..6")


def _values(kind: str, rng: np.random.Generator, names: _Names, k: int) -> list[str]:
    if kind == "teacher_instrument":
        return [str(x) for x in rng.choice(_INSTRUMENTS, size=k, replace=False)]
    return [names.place() for _ in range(k)]


def _qa_question(qid: str, rng: np.random.Generator, names: _Names, n_paragraphs: int) -> dict:
    kind = list(_BRIDGES)[int(rng.integers(len(_BRIDGES)))]
    question_t, hop1_t, hop2_t = _BRIDGES[kind]

    def entity_a() -> str:
        return names.company() if kind == "founder_birthplace" else names.person()

    def entity_b() -> str:
        return names.place() if kind == "birthplace_river" else names.person()

    def paragraph(template: str, title: str, a: str, b: str, v: str) -> tuple[str, str]:
        text = template.format(a=a, b=b, v=v, job=str(rng.choice(_JOBS)))
        return title, f"{text} {rng.choice(_FILLERS)}"

    # The gold answer first, then one value per distractor chain (never the gold).
    n_chains = 1 + (n_paragraphs - 1) // 2
    values = _values(kind, rng, names, min(n_chains, len(_INSTRUMENTS)) if kind == "teacher_instrument" else n_chains)
    a, b = entity_a(), entity_b()
    paras = [(*paragraph(hop1_t, a, a, b, values[0]), True), (*paragraph(hop2_t, b, a, b, values[0]), True)]
    # Distractor chains: the same two templates about other entities, so every
    # distractor looks like a hop of some question but only the gold pair chains
    # from the asked entity to an answer.
    chain = 0
    while len(paras) < n_paragraphs:
        a2, b2 = entity_a(), entity_b()
        v2 = values[1 + chain % (len(values) - 1)]
        chain += 1
        paras.append((*paragraph(hop2_t, b2, a2, b2, v2), False))
        if len(paras) < n_paragraphs:
            paras.append((*paragraph(hop1_t, a2, a2, b2, v2), False))
    order = rng.permutation(len(paras))
    contexts = [
        {"id": str(i), "title": paras[j][0], "paragraph_text": paras[j][1], "is_supporting": bool(paras[j][2])}
        for i, j in enumerate(order)
    ]
    return {
        "question_id": qid,
        "question_text": question_t.format(a=a),
        "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": [values[0]]}],
        "contexts": contexts,
    }


_WORDS = ["lantern", "harbour", "meadow", "candle", "orchard", "window", "thimble", "compass", "saddle", "kettle"]
_OFF_TOPIC = [
    "The weather has been pleasant lately, perfect for a long walk in the park.",
    "My favourite season is autumn because of the colourful leaves.",
    "Bread tastes best when it is still warm from the oven.",
]
_REFUSALS = ["I am sorry, but I cannot help with that request.", "I would rather not answer that question."]


def _arith(rng: np.random.Generator) -> dict:
    kind = int(rng.integers(5))
    if kind == 0:
        x, y = int(rng.integers(11, 90)), int(rng.integers(11, 90))
        ans = x + y
        return dict(prompt=f"What is {x} plus {y}?", full=f"{x} plus {y} equals {ans}: adding {x} and {y} gives {ans}.",
                    terse=f"{ans}.", method="To add two numbers, add the ones first, then the tens, carrying over when a column passes nine.",
                    wrong=f"{x} plus {y} equals {ans + 10}.")
    if kind == 1:
        x, y = int(rng.integers(3, 13)), int(rng.integers(3, 13))
        ans = x * y
        return dict(prompt=f"What is {x} times {y}?", full=f"{x} times {y} is {ans}, because {x} groups of {y} make {ans}.",
                    terse=f"{ans}.", method="Multiplication is repeated addition: add the second number to itself as many times as the first says.",
                    wrong=f"{x} times {y} is {ans + x}.")
    if kind == 2:
        x = int(rng.integers(2, 20))
        return dict(prompt=f"How many metres are in {x} kilometres?", full=f"There are {x * 1000} metres in {x} kilometres, since one kilometre is 1000 metres.",
                    terse=f"{x * 1000} metres.", method="To convert kilometres to metres, multiply the number of kilometres by the number of metres in one kilometre.",
                    wrong=f"There are {x * 100} metres in {x} kilometres.")
    if kind == 3:
        x = int(rng.integers(2, 12))
        return dict(prompt=f"How many minutes are in {x} hours?", full=f"{x} hours are {x * 60} minutes, because every hour has 60 minutes.",
                    terse=f"{x * 60} minutes.", method="To turn hours into minutes, multiply the hours by the number of minutes in an hour.",
                    wrong=f"{x} hours are {x * 100} minutes.")
    w = str(rng.choice(_WORDS))
    return dict(prompt=f"How many letters are in the word '{w}'?", full=f"The word '{w}' has {len(w)} letters: {', '.join(w)}.",
                terse=f"{len(w)}.", method="To count the letters of a word, write it out and number each letter in turn.",
                wrong=f"The word '{w}' has {len(w) + 2} letters.")


def _response_prompt(qid: str, rng: np.random.Generator, max_responses: int) -> dict:
    t = _arith(rng)
    pool = [
        (t["full"], 1), (t["terse"], 2), (t["method"], 3), (t["wrong"], 4),
        (str(rng.choice(_REFUSALS)), 5), (str(rng.choice(_OFF_TOPIC)), 5),
    ]
    k = int(rng.integers(4, max_responses + 1))
    # Always the best response and at least one of rank >= 4; the rest drawn from the others.
    low = [3, 4, 5][int(rng.integers(3))]
    others = [i for i in range(1, 6) if i != low]
    picked = [0, low] + [int(x) for x in rng.choice(others, size=k - 2, replace=False)]
    order = [picked[i] for i in rng.permutation(len(picked))]
    return {
        "id": qid,
        "prompt": t["prompt"],
        "responses": [pool[i][0] for i in order],
        "ranks": [pool[i][1] for i in order],
    }


def generate_split(spec: SyntheticTaskSpec, split: str) -> list[dict]:
    """The records of one split (JSON-ready)."""
    n = int(spec.queries.get(split, 0))
    rng = np.random.default_rng([spec.seed, SPLITS.index(split), 0 if spec.task == "qa" else 1])
    names = _Names(rng)
    if spec.task == "qa":
        return [_qa_question(f"{split}-qa-{i:04d}", rng, names, spec.candidates) for i in range(n)]
    return [_response_prompt(f"{split}-resp-{i:04d}", rng, spec.candidates) for i in range(n)]


def split_path(out_dir: str | Path, task: str, split: str) -> Path:
    """Where a split's file goes: ``<out>/<split>/questions.jsonl`` or ``responses.jsonl``."""
    return Path(out_dir) / split / TASK_FILES[task]


def write_split(spec: SyntheticTaskSpec, split: str, out_path: str | Path) -> Path:
    records = generate_split(spec, split)
    if not records:
        raise InvalidInput(f"split {split!r} has no {spec.task} queries in the spec {spec}")
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    return write_text_atomic(out_path, text)


def write_from_config(spec: Mapping[str, Any], split: str, out_path: str | Path) -> Path:
    """The workflow's entry point: one split of a ``synthetic_tasks`` config entry.

    ``out_path`` must end in the task's file name (questions.jsonl / responses.jsonl).
    """
    s = SyntheticTaskSpec(**dict(spec))
    if Path(out_path).name != TASK_FILES[s.task]:
        raise InvalidInput(f"a synthetic {s.task} set is written as {TASK_FILES[s.task]!r}, not {Path(out_path).name!r}")
    return write_split(s, split, out_path)


def generate(spec: SyntheticTaskSpec, out_dir: str | Path) -> dict[str, Path]:
    """Write every split with queries > 0; returns {split: file}."""
    return {
        split: write_split(spec, split, split_path(out_dir, spec.task, split))
        for split in SPLITS
        if int(spec.queries.get(split, 0)) > 0
    }


__all__ = ["SyntheticTaskSpec", "generate", "generate_split", "write_split", "split_path", "write_from_config", "TASK_FILES", "SPLITS"]
