"""A deterministic synthetic collection for the embedded default.

Queries ask for one attribute of an invented entity ("Where was Velmora Quintrel
born?"). Per query the candidate list holds the one document that answers it
(grade 3), optionally a second one that answers it in passing (grade 2), documents
about the same entity that do not answer (grade 1) and documents about other
invented entities, some asking-attribute look-alikes (grade 0). Qrels follow by
construction. The first stage is a lexical-overlap score with seeded noise, so it is
good but imperfect, like BM25. Everything derives from one integer seed: no
external files, identical on every machine.

Files are written in the same real formats users bring (rank_llm JSON candidates,
TREC qrels, TREC topics), one folder per split, so the fixture builder exercises
the real loaders.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from presdep.contracts.schemas import write_text_atomic

SPLITS = ("train", "heldout", "test")

_ONSETS = ["b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kl", "st", "th", "tr", "qu"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ia", "ou"]
_CODAS = ["", "n", "r", "l", "s", "th", "x", "nd", "m"]

# attribute -> (question template, direct statement, passing mention, value pool)
_ATTRIBUTES = {
    "birthplace": (
        "Where was {e} born?",
        "{e} was born in the town of {v}.",
        "Letters from {v}, the town where {e} grew up, describe a quiet childhood.",
        "place",
    ),
    "profession": (
        "What did {e} work as?",
        "{e} worked for most of their life as a {v}.",
        "Colleagues remember {e} mainly through their years as a {v}.",
        "job",
    ),
    "instrument": (
        "Which instrument did {e} play?",
        "{e} played the {v} in several touring ensembles.",
        "A worn {v} owned by {e} is kept in a small museum.",
        "instrument",
    ),
    "founded": (
        "In which year did {e} found their company?",
        "{e} founded a trading company in the year {v}.",
        "The company that {e} started, records show, opened its doors in {v}.",
        "year",
    ),
    "river": (
        "Which river did {e} map?",
        "{e} produced the first complete map of the {v} river.",
        "Surveys of the {v} river still cite the field notes of {e}.",
        "river",
    ),
}
_POOLS = {
    "job": ["glassblower", "cartographer", "beekeeper", "clockmaker", "ferry pilot", "printer", "astronomer", "tanner"],
    "instrument": ["viola", "oboe", "harp", "bassoon", "lute", "cornet", "zither", "cello"],
}
_FILLERS = [
    "Few records of this period survive.",
    "The account was later retold in a regional almanac.",
    "Local archives hold several letters on the subject.",
    "Historians still debate the exact details.",
    "A short biography appeared decades later.",
    "Neighbours described a modest and careful person.",
]


@dataclass(frozen=True)
class SyntheticSpec:
    seed: int = 13
    entities: int = 120
    queries: dict | None = None  # split -> number of queries
    candidates: int = 20
    second_relevant_share: float = 0.5
    noise: float = 1.0

    def queries_per_split(self) -> dict[str, int]:
        return dict(self.queries or {"train": 24, "heldout": 12, "test": 12})


def _name(rng: np.random.Generator) -> str:
    def word(syllables: int) -> str:
        parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)]
        return ("".join(parts) + rng.choice(_CODAS)).capitalize()

    return f"{word(2)} {word(int(rng.integers(2, 4)))}"


def _value(kind: str, rng: np.random.Generator) -> str:
    if kind == "year":
        return str(int(rng.integers(1700, 1950)))
    if kind in ("place", "river"):
        base = (rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)).capitalize()
        return base
    return str(rng.choice(_POOLS[kind]))


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _entities(spec: SyntheticSpec, rng: np.random.Generator) -> list[dict]:
    names: set[str] = set()
    out = []
    while len(out) < spec.entities:
        name = _name(rng)
        if name in names:
            continue
        names.add(name)
        out.append({"name": name, **{a: _value(kind, rng) for a, (_, _, _, kind) in _ATTRIBUTES.items()}})
    return out


def _doc(template: str, entity: dict, attribute: str, rng: np.random.Generator) -> str:
    text = template.format(e=entity["name"], v=entity[attribute])
    return f"{text} {rng.choice(_FILLERS)}"


def _first_stage(query: str, docs: list[str], rng: np.random.Generator, noise: float) -> np.ndarray:
    """Lexical overlap with seeded noise: a stand-in first stage that is good but not perfect."""
    q = set(_tokens(query))
    overlap = np.array([len(q & set(_tokens(d))) for d in docs], dtype=float)
    return overlap + rng.normal(0.0, noise, size=len(docs))


def generate_split(spec: SyntheticSpec, split: str, entities: list[dict], rng: np.random.Generator):
    """(rank_llm entries, qrels lines, topics lines) for one split."""
    n_queries = spec.queries_per_split()[split]
    entries, qrels, topics = [], [], []
    attrs = list(_ATTRIBUTES)
    for qi in range(n_queries):
        qid = f"{split}-{qi:04d}"
        target = entities[int(rng.integers(len(entities)))]
        attribute = attrs[int(rng.integers(len(attrs)))]
        question, direct, passing, _ = _ATTRIBUTES[attribute]
        query = question.format(e=target["name"])
        docs: list[tuple[str, int]] = [(_doc(direct, target, attribute, rng), 3)]
        if rng.random() < spec.second_relevant_share:
            docs.append((_doc(passing, target, attribute, rng), 2))
        others = [a for a in attrs if a != attribute]
        for a in rng.permutation(others)[: int(rng.integers(1, 3))]:
            docs.append((_doc(_ATTRIBUTES[a][1], target, str(a), rng), 1))
        while len(docs) < spec.candidates:
            other = entities[int(rng.integers(len(entities)))]
            if other["name"] == target["name"]:
                continue
            # Half the distractors share the asked attribute: lexically close, irrelevant.
            a = attribute if rng.random() < 0.5 else attrs[int(rng.integers(len(attrs)))]
            template = _ATTRIBUTES[a][1] if rng.random() < 0.7 else _ATTRIBUTES[a][2]
            docs.append((_doc(template, other, a, rng), 0))
        texts = [d for d, _ in docs]
        scores = _first_stage(query, texts, rng, spec.noise)
        order = np.argsort(-scores, kind="stable")
        # Ids in a random order, so no id pattern marks the relevant document.
        doc_ids = [f"{qid}-d{k:03d}" for k in rng.permutation(len(docs))]
        hits = []
        for rank, j in enumerate(order, start=1):
            hits.append({"content": texts[j], "qid": qid, "docid": doc_ids[j], "rank": rank, "score": round(float(scores[j]), 6)})
        entries.append({"query": query, "hits": hits})
        qrels.extend(f"{qid} 0 {doc_ids[j]} {g}" for j, (_, g) in enumerate(docs))
        topics.append(f"{qid}\t{query}")
    return entries, qrels, topics


def generate(spec: SyntheticSpec, out_dir: str | Path) -> dict[str, Path]:
    """Write ``<out>/<split>/{candidates.json,qrels.txt,topics.tsv}`` for every split."""
    out_dir = Path(out_dir)
    rng = np.random.default_rng(spec.seed)
    entities = _entities(spec, rng)
    written = {}
    for split in SPLITS:
        if spec.queries_per_split().get(split, 0) <= 0:
            continue
        # One child generator per split: adding queries to one split leaves the others unchanged.
        split_rng = np.random.default_rng([spec.seed, SPLITS.index(split)])
        entries, qrels, topics = generate_split(spec, split, entities, split_rng)
        folder = out_dir / split
        write_text_atomic(folder / "qrels.txt", "\n".join(qrels) + "\n")
        write_text_atomic(folder / "topics.tsv", "\n".join(topics) + "\n")
        write_text_atomic(folder / "candidates.json", json.dumps(entries, indent=1) + "\n")
        written[split] = folder
    return written
