"""Synthetic stand-ins for every catalogue source, written in the source's ORIGINAL published format.

:func:`write_originals` writes, under one folder, what the loopback servers and client caches of
a rehearsal hold, so that presdep's own fetch code (presdep.data.fetch) reads them exactly as it
reads the real sources:

- ``hub/datasets/<org>/<name>/``: the content of a Hugging Face dataset repository per
  ``hf_datasets`` source (Parquet data files in the published schema, and a README.md whose
  ``configs:`` front matter maps each config and split to its files);
- ``files/<name>``: each ``url`` source's download (zips laid out as the releases are);
- ``local/<catalogue id>/``: the files a user-supplied entry's ``local:`` spec asks for (a BEIR
  folder, or rank_llm JSON candidates with TREC qrels);
- ``lucene/<index>/docs.jsonl``: a pyserini JsonCollection per prebuilt index, to be indexed;
- ``anserini/topics-and-qrels/``: the topics and qrels files Anserini keeps in its cache;
- ``ir_datasets/msmarco-passage/train/``: MS MARCO's train queries and qrels where ir_datasets
  caches them.

Text is deterministic pseudo-English. Each ranked query owns three invented key words that
appear nowhere else, and its documents carry them in proportion to their grade (every key for
the best, one key for an unjudged distractor), so BM25 over a collection ranks each query's
judged relevant documents at its top. The invented words are consonant-vowel syllables closed
by n, m or k, which no Porter rule rewrites and no stopword list holds, so Lucene's English
analyzer keeps them apart. Same arguments, same bytes: every random choice comes from a
generator seeded by (seed, what it is for), JSON keys are sorted, Parquet, gzip and zip carry
no clock.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import random
import re
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from presdep.config.catalogue import load_catalogue
from presdep.config.query_lists import QueryList
from presdep.contracts.schemas import atomic_write, write_bytes_atomic, write_text_atomic

# --------------------------------------------------------------------------- words

_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_CODAS = "nmk"
_SYLLABLES = [c + v for c in _ONSETS for v in _VOWELS]
_WORD_SPACE = len(_SYLLABLES) ** 3 * len(_CODAS)
_WORD_STEP = 7919  # coprime with _WORD_SPACE (2^3 * 3 * 5^3 * 7^3): i -> word is one-to-one

# Shared filler; none of it is a word of the query templates, so only key words match a query.
FILLER = (
    "river", "stone", "cloud", "maple", "tiger", "ocean", "lemon", "piano", "harbor", "valley", "copper",
    "garden", "lantern", "meadow", "signal", "ledger", "market", "winter", "summer", "engine", "basket",
    "island", "mirror", "orchard", "pepper", "silver", "timber", "tunnel", "velvet", "window", "canyon",
    "circle", "desert", "forest", "glacier", "hollow", "journal", "kettle", "ladder", "marble", "needle",
    "pillar", "quarry", "ribbon", "saddle", "tablet", "violet", "wagon", "anchor", "beacon", "candle",
    "harvest", "compass", "feather", "granite", "helmet", "lagoon", "parcel", "riddle", "shelter",
)
_VERBS = ("describes", "records", "reports", "mentions", "explains", "lists", "notes", "covers", "traces", "compares")
_QUERY_TEMPLATES = (
    "what is the {0} of {1} {2}", "how does {0} {1} affect {2}", "{0} {1} {2} definition",
    "where is {0} {1} {2} found", "why do {0} and {1} share {2}", "which {0} {1} has {2}",
)


class Vocab:
    """Invented words, each handed out once per write (so a key word belongs to one query)."""

    def __init__(self, seed: int) -> None:
        self._next = 0
        self._offset = random.Random(f"vocab:{seed}").randrange(_WORD_SPACE)

    def word(self) -> str:
        n = (self._next * _WORD_STEP + self._offset) % _WORD_SPACE
        self._next += 1
        if self._next > _WORD_SPACE:
            raise ValueError("the invented-word space is exhausted")
        n, coda = divmod(n, len(_CODAS))
        parts = []
        for _ in range(3):
            n, s = divmod(n, len(_SYLLABLES))
            parts.append(_SYLLABLES[s])
        return "".join(parts) + _CODAS[coda]

    def words(self, k: int) -> list[str]:
        return [self.word() for _ in range(k)]

    def title(self, k: int = 2) -> str:
        return " ".join(w.capitalize() for w in self.words(k))


def _sentence(rng: random.Random, keys: Sequence[str] = (), n_filler: int = 6) -> str:
    """A sentence of filler words with ``keys`` placed among them."""
    words = [rng.choice(FILLER) for _ in range(n_filler)] + list(keys)
    rng.shuffle(words)
    verb_at = rng.randrange(1, len(words))
    words.insert(verb_at, rng.choice(_VERBS))
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."  # names keep their capitals


def _text(rng: random.Random, keys: Sequence[str], sentences: int = 3) -> str:
    """Sentences sharing out ``keys`` (a key may repeat, which BM25 rewards)."""
    parts: list[list[str]] = [[] for _ in range(sentences)]
    for i, k in enumerate(keys):
        parts[i % sentences].append(k)
    return " ".join(_sentence(rng, p, rng.randint(4, 8)) for p in parts)


def _rng(seed: int, *what: object) -> random.Random:
    return random.Random(":".join(map(str, (seed, *what))))


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


# --------------------------------------------------------------------------- writers


def _json(obj: Any, indent: int | None = None) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=indent)


def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(_json(r) + "\n" for r in rows)


def _write_parquet(path: Path, table: pa.Table) -> Path:
    # Fixed settings: one row group, snappy (as the hub's exports), no pandas metadata.
    return atomic_write(path, lambda tmp: pq.write_table(table, str(tmp), compression="snappy",
                                                         row_group_size=max(table.num_rows, 1)))


def _gzip(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


_ZIP_TIME = (2020, 4, 7, 0, 0, 0)


def _zip(members: Mapping[str, str]) -> bytes:
    """A zip of text members (``folder/`` entries first, as archivers write them), without a clock."""
    buf = io.BytesIO()
    folders = sorted({m.rsplit("/", 1)[0] + "/" for m in members if "/" in m})
    with zipfile.ZipFile(buf, "w") as zf:
        for d in folders:
            info = zipfile.ZipInfo(d, date_time=_ZIP_TIME)
            info.external_attr = (0o40755 << 16) | 0x10
            zf.writestr(info, b"")
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100644 << 16
            zf.writestr(info, members[name].encode("utf-8"))
    return buf.getvalue()


# --------------------------------------------------------------------------- ranked collections


@dataclass
class RankedSet:
    """A reranking collection: topics, graded judgements and the documents that answer them."""

    topics: dict[str, str]  # every topic, judged or not, in file order
    grades: dict[str, dict[str, int]]  # judged topics only
    docs: dict[str, list[str]] = field(default_factory=dict)  # query id -> its doc ids, best first


@dataclass
class Collection:
    """One document collection (a Lucene index or a BEIR corpus): id -> (title, text)."""

    style: str
    docs: dict[str, tuple[str, str]] = field(default_factory=dict)

    def new_id(self, rng: random.Random) -> str:
        while True:
            did = _doc_id(self.style, rng)
            if did not in self.docs:
                return did


def _doc_id(style: str, rng: random.Random) -> str:
    """A document id in the collection's own style."""
    if style == "msmarco-v1-passage":
        return str(rng.randrange(8_841_823))
    if style == "msmarco-v2-passage":
        return f"msmarco_passage_{rng.randrange(70):02d}_{rng.randrange(10**9)}"
    digits = {"scifact": 8, "fiqa": 6, "signal1m": 18}
    if style in digits:
        return str(rng.randrange(10 ** (digits[style] - 1), 10 ** digits[style]))
    if style == "nfcorpus":
        return f"MED-{rng.randrange(1, 6000)}"
    if style == "trec-covid":
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8))
    if style == "robust04":
        return f"FBIS{rng.randint(3, 4)}-{rng.randrange(10000, 70000)}"
    if style == "trec-news":
        return "-".join(_hex(rng, n) for n in (8, 4, 4, 4, 12))
    if style == "webis-touche2020":
        return f"{_hex(rng, 8)}-2019-04-18T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z-" \
               f"{rng.randrange(100000):05d}-000"
    if style == "arguana":
        return f"test-{rng.choice(('economy', 'health', 'culture', 'politics'))}-{_hex(rng, 10)}-pro0{rng.randint(1, 5)}b"
    if style == "dbpedia-entity":
        return f"<dbpedia:{_hex(rng, 10).capitalize()}>"
    if style == "climate-fever":
        return f"Topic_{_hex(rng, 8)}"
    return _hex(rng, 12)  # a user's own collection (legal-a, legal-b)


# Grade plans: the judged documents of one query, best first (the rest are unjudged distractors).
_PLANS = {3: ((3, 2, 1, 0, 0), (2, 2, 1, 0, 0), (3, 1, 1, 0)), 2: ((2, 1, 0), (2, 2, 0), (1, 1, 0)),
          1: ((1,), (1, 1)), "train": ((1,),)}


def _doc_keys(grade: int | None, top: int, keys: Sequence[str], rng: random.Random) -> list[str]:
    """How many of a query's keys a document carries, by grade (unjudged: None)."""
    if grade is None:
        return [rng.choice(keys[1:])]
    if grade == top:
        return list(keys) * 2
    if grade >= 2:
        return list(keys)
    return list(keys[:2]) if grade == 1 else [keys[0]]


def ranked_set(rng: random.Random, vocab: Vocab, collection: Collection, qids: Sequence[str], *,
               docs_per_query: int, plan: int | str, unjudged_topics: int = 0, titles: bool = False) -> RankedSet:
    """Topics, judgements and documents (added to ``collection``) for ``qids``."""
    plans = _PLANS[plan]
    out = RankedSet({}, {})
    for qid in qids:
        keys = vocab.words(3)
        out.topics[qid] = rng.choice(_QUERY_TEMPLATES).format(*keys)
        judged = list(rng.choice(plans))[:docs_per_query]
        top = max(judged)
        grades: dict[str, int] = {}
        ids = []
        for j in range(max(docs_per_query, len(judged))):
            g = judged[j] if j < len(judged) else None
            carried = _doc_keys(g, top, keys, rng)
            did = collection.new_id(rng)
            title = f"{carried[0].capitalize()} {rng.choice(FILLER)}" if titles else ""
            collection.docs[did] = (title, _text(rng, carried, rng.randint(2, 4)))
            ids.append(did)
            if g is not None:
                grades[did] = g
        out.grades[qid] = grades
        out.docs[qid] = ids
    taken = set(qids)
    for _ in range(unjudged_topics):  # topics files list more topics than are judged (DL19: 200 of 43)
        qid = str(rng.randrange(10_000, 1_200_000))
        if qid in taken:
            continue
        taken.add(qid)
        out.topics[qid] = rng.choice(_QUERY_TEMPLATES).format(*vocab.words(3))
    return out


def _qrels_lines(grades: Mapping[str, Mapping[str, int]], iteration: str = "0", sep: str = " ") -> str:
    return "".join(f"{q}{sep}{iteration}{sep}{d}{sep}{g}\n" for q, dg in grades.items() for d, g in dg.items())


def _topics_tsv(topics: Mapping[str, str]) -> str:
    return "".join(f"{q}\t{t}\n" for q, t in topics.items())


_TOKEN = re.compile(r"[a-z0-9]+")


def bm25_order(collection: Mapping[str, str], query: str, *, k1: float = 0.9, b: float = 0.4) -> list[tuple[str, float]]:
    """A plain BM25 (lower-cased word tokens, Lucene's idf) of ``query`` over ``{doc id: text}``,
    best first, documents sharing no term left out: the legal sets' first-stage scores."""
    toks = {d: _TOKEN.findall(t.lower()) for d, t in collection.items()}
    n = len(toks)
    avg = sum(map(len, toks.values())) / max(n, 1)
    df = Counter(w for ws in toks.values() for w in set(ws))
    terms = set(_TOKEN.findall(query.lower()))
    scores = []
    for d, ws in toks.items():
        tf, s = Counter(ws), 0.0
        for w in terms & tf.keys():
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            s += idf * tf[w] / (tf[w] + k1 * (1 - b + b * len(ws) / avg))
        if s > 0:
            scores.append((d, s))
    return sorted(scores, key=lambda x: (-x[1], x[0]))


# --------------------------------------------------------------------------- topics and qrels names


def anserini_topics_file(name: str) -> str:
    """The file Anserini caches topics ``name`` in (``beir-v1.0.0-X-test`` -> ``.X.test.tsv.gz``)."""
    if name.startswith("beir-") and name.endswith("-test"):
        return f"topics.{name[:-len('-test')]}.test.tsv.gz"
    return f"topics.{name}.txt"


def anserini_qrels_file(name: str) -> str:
    if name.startswith("beir-") and name.endswith("-test"):
        return f"qrels.{name[:-len('-test')]}.test.txt"
    return f"qrels.{name}.txt"


def beir_set(index_or_topics: str) -> str:
    """``beir-v1.0.0-fiqa.flat`` or ``beir-v1.0.0-fiqa-test`` -> ``fiqa``."""
    m = re.fullmatch(r"beir-v1\.0\.0-(.+?)(?:\.flat|-test)", index_or_topics)
    if not m:
        raise ValueError(f"{index_or_topics!r} is not a BEIR v1.0.0 index or topics name")
    return m.group(1)


# BEIR sets judged with grades 0-2 (the others judge relevant documents only, grade 1).
_BEIR_GRADED = {"trec-covid", "nfcorpus", "dbpedia-entity", "webis-touche2020", "signal1m", "trec-news", "robust04"}


# --------------------------------------------------------------------------- QA rows


def _sentences(rng: random.Random, keys: Sequence[str], n: int) -> list[str]:
    """HotpotQA's sentence lists: sentences after the first keep their leading space."""
    out = []
    for i in range(n):
        s = _sentence(rng, [keys[i]] if i < len(keys) else [], rng.randint(4, 8))
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
    question = f"Which {rng.choice(FILLER)} {rng.choice(_VERBS)} the {bridge} of {titles[sup[0]]}?"
    return _Question(qid, question, answer, bridge, titles, sentences, sup)


def hotpotqa_rows(rng: random.Random, vocab: Vocab, n: int, paragraphs: int, supporting: int) -> list[dict]:
    rows = []
    for _ in range(n):
        q = _question(rng, vocab, "5a" + _hex(rng, 22), paragraphs, supporting)
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
        q = _question(rng, vocab, _hex(rng, 32), paragraphs, supporting)
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
    return head + _text(rng, list(keys) if good else [], n)


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
                "annotations": {a: {"Rating": rating, "Rationale": _sentence(rng)} for a in _UF_ASPECTS},
                "critique": _sentence(rng), "custom_system_prompt": "", "fine-grained_score": float(rating),
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


# --------------------------------------------------------------------------- the catalogue walk


_SPLIT_FILE = "{split}-00000-of-00001.parquet"


def _hf_folder(config: str | None) -> str:
    return config or "data"


def _url_filename(source: Mapping[str, Any]) -> str:
    return source.get("filename") or source["url"].split("?")[0].rstrip("/").split("/")[-1]


def _readme(repo_id: str, configs: Mapping[str, Mapping[str, str]]) -> str:
    lines = ["---", "configs:"]
    for config in sorted(configs):
        lines += [f"- config_name: {config}", "  data_files:"]
        for split in sorted(configs[config]):
            lines += [f"  - split: {split}", f"    path: {configs[config][split]}"]
    lines += ["---", "", f"# {repo_id} (synthetic)", "",
              "Invented rows in the published schema of this dataset, for an offline rehearsal. Not the real data.", ""]
    return "\n".join(lines)


class _Writer:
    def __init__(self, root: Path, *, queries: int, docs_per_query: int, seed: int, pool_rows: int) -> None:
        if queries < 1 or docs_per_query < 2 or pool_rows < 1:
            raise ValueError("need queries >= 1, docs_per_query >= 2 and pool_rows >= 1")
        self.root, self.queries, self.dpq, self.seed, self.pool_rows = Path(root), queries, docs_per_query, seed, pool_rows
        self.vocab = Vocab(seed)
        self.catalogue = load_catalogue()
        self.collections: dict[str, Collection] = {}  # prebuilt index -> documents
        self.hf: dict[str, dict[str, dict[str, pa.Table]]] = {}  # repo id -> config -> split -> rows
        self.report: dict[str, Any] = {"params": {"queries": queries, "docs_per_query": docs_per_query, "seed": seed,
                                                  "pool_rows": pool_rows},
                                       "datasets": {}, "training_pools": {}, "indexes": {}}

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def rng(self, *what: object) -> random.Random:
        return _rng(self.seed, *what)

    # ----------------------------------------------------------------- ranked

    def _list_ids(self, entry: Mapping[str, Any], n: int | None) -> list[str]:
        name = entry.get("shuffle_queries")
        if not name:
            return []
        ids = list(QueryList(name, sha256=self.catalogue["query_lists"][name]["sha256"]).ids())
        return ids if n is None else ids[:n]

    def _qids(self, cid: str, entry: Mapping[str, Any], *, full_list: bool) -> list[str]:
        """A DL set's whole fixed list; else the list's first ``queries`` ids, topped up with new ones."""
        qids = self._list_ids(entry, None if full_list else self.queries)
        want = len(qids) if full_list and qids else self.queries
        rng = self.rng(cid, "qids")
        while len(qids) < want:
            q = f"{cid}-q{len(qids) + 1:03d}" if entry["source"]["kind"] == "user_supplied" else str(rng.randrange(1, 10**6))
            if q not in qids:
                qids.append(q)
        return qids

    def _collection(self, index: str) -> Collection:
        if index not in self.collections:
            self.collections[index] = Collection(index if index.startswith("msmarco") else beir_set(index))
        return self.collections[index]

    def _topics_qrels(self, source: Mapping[str, Any], ranked: RankedSet) -> dict[str, str]:
        folder = self.root / "anserini" / "topics-and-qrels"
        topics, qrels = folder / anserini_topics_file(source["topics"]), folder / anserini_qrels_file(source["qrels"])
        text = _topics_tsv(ranked.topics)
        if topics.name.endswith(".gz"):
            write_bytes_atomic(topics, _gzip(text))
        else:
            write_text_atomic(topics, text)
        # DL19's published qrels name the iteration Q0; the later DL and the BEIR files write 0.
        write_text_atomic(qrels, _qrels_lines(ranked.grades, "Q0" if source["qrels"] == "dl19-passage" else "0"))
        return {"topics": self.rel(topics), "qrels": self.rel(qrels)}

    def pyserini(self, section: str, cid: str, entry: Mapping[str, Any]) -> dict:
        source = entry["source"]
        index = source["index"]
        coll = self._collection(index)
        rng = self.rng(cid, "ranked")
        if isinstance(source["topics"], Mapping):  # an ir_datasets id: MS MARCO's train queries
            if source["topics"].get("id") != "msmarco-passage/train/judged" or index != "msmarco-v1-passage":
                raise ValueError(f"{cid}: no original writer for ir_datasets topics {source['topics']!r}")
            taken: set[str] = set()
            for other in ("dl19", "dl20"):
                taken |= set(self._list_ids(self.catalogue["datasets"].get(other, {}), None))
            qids: list[str] = []
            while len(qids) < self.pool_rows:
                q = str(rng.randrange(1, 1_200_000))
                if q not in taken:
                    taken.add(q)
                    qids.append(q)
            ranked = ranked_set(rng, self.vocab, coll, qids, docs_per_query=self.dpq, plan="train")
            folder = self.root / "ir_datasets" / "msmarco-passage" / "train"
            write_text_atomic(folder / "queries.tsv", _topics_tsv(ranked.topics))
            # qrels.train.tsv as MS MARCO publishes it: tab-separated TREC columns.
            write_text_atomic(folder / "qrels", _qrels_lines(ranked.grades, "0", "\t"))
            files = {"topics": self.rel(folder / "queries.tsv"), "qrels": self.rel(folder / "qrels")}
        else:
            dl = index.startswith("msmarco")
            qids = self._qids(cid, entry, full_list=dl)
            if dl:
                plan: int | str = 3
            else:
                plan = 2 if beir_set(index) in _BEIR_GRADED else 1
            ranked = ranked_set(rng, self.vocab, coll, qids, docs_per_query=self.dpq, plan=plan,
                                unjudged_topics=2 if dl else 0, titles=not dl)
            files = self._topics_qrels(source, ranked)
        files["index"] = self.rel(self.root / "lucene" / index / "docs.jsonl")
        return {"kind": source["kind"], "files": files, "index": index,
                "rows": {"topics": len(ranked.topics), "judged": len(ranked.grades),
                         "judgements": sum(map(len, ranked.grades.values())),
                         "documents": sum(map(len, ranked.docs.values()))}}

    def user_supplied(self, section: str, cid: str, entry: Mapping[str, Any]) -> dict:
        source, local = entry["source"], entry["source"].get("local") or {}
        rng = self.rng(cid, "ranked")
        folder = self.root / "local" / cid
        if local.get("beir") == "folder":
            coll = Collection(beir_set(source["index"]))
            ranked = ranked_set(rng, self.vocab, coll, self._qids(cid, entry, full_list=False),
                                docs_per_query=self.dpq, plan=2 if coll.style in _BEIR_GRADED else 1, titles=True)
            write_text_atomic(folder / "corpus.jsonl", _jsonl(
                {"_id": d, "title": t, "text": x, "metadata": {}} for d, (t, x) in coll.docs.items()))
            write_text_atomic(folder / "queries.jsonl", _jsonl(
                {"_id": q, "text": t, "metadata": {}} for q, t in ranked.topics.items()))
            write_text_atomic(folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\n" + "".join(
                f"{q}\t{d}\t{g}\n" for q, dg in ranked.grades.items() for d, g in dg.items()))
            files = {"beir": self.rel(folder)}
            if source.get("topics") and source.get("qrels"):  # Anserini's copies, for a machine that has them
                files.update(self._topics_qrels(source, ranked))
            rows = {"documents": len(coll.docs), "queries": len(ranked.topics),
                    "judgements": sum(map(len, ranked.grades.values()))}
        elif local.get("candidates") == "rank_llm_json":
            coll = Collection(cid)
            qids = self._qids(cid, entry, full_list=False)
            ranked = ranked_set(rng, self.vocab, coll, qids, docs_per_query=self.dpq, plan=3)
            texts = {d: x for d, (_, x) in coll.docs.items()}
            entries = []
            for q in qids:
                mine = {d: texts[d] for d in ranked.docs[q]}
                order = bm25_order(mine, ranked.topics[q])
                order += [(d, 0.0) for d in ranked.docs[q] if d not in dict(order)]
                entries.append({"query": ranked.topics[q], "hits": [
                    {"content": texts[d], "qid": q, "docid": d, "rank": r, "score": round(s, 4)}
                    for r, (d, s) in enumerate(order, start=1)]})
            write_text_atomic(folder / "candidates.json", _json(entries) + "\n")
            write_text_atomic(folder / "qrels.txt", _qrels_lines(ranked.grades))
            files = {"candidates": self.rel(folder / "candidates.json"), "qrels": self.rel(folder / "qrels.txt")}
            rows = {"queries": len(entries), "candidates": sum(len(e["hits"]) for e in entries),
                    "judgements": sum(map(len, ranked.grades.values()))}
        else:
            raise ValueError(f"{section}.{cid}: no original writer for user-supplied local spec {local!r}")
        return {"kind": "user_supplied", "files": files, "rows": rows}

    # ----------------------------------------------------------------- rows (hub and url)

    def _rows(self, section: str, cid: str, entry: Mapping[str, Any]) -> tuple[list[dict], pa.Schema | None]:
        conv = entry["source"]["converter"]
        rng = self.rng(cid, "rows")
        n = self.pool_rows if section == "training_pools" else self.queries
        sel = entry.get("selection") or {}
        supporting = int(sel.get("supporting", 2))
        if conv == "hotpotqa_hf":
            return hotpotqa_rows(rng, self.vocab, n, max(10, int(sel.get("paragraphs", 10))), supporting), HOTPOTQA_SCHEMA
        if conv == "twowiki_json":
            return twowiki_rows(rng, self.vocab, n, max(10, int(sel.get("paragraphs", 10))), supporting), None
        if conv == "musique_jsonl":
            return musique_rows(rng, self.vocab, n, max(20, int(sel.get("paragraphs", 20))), supporting), None
        if conv == "rewardbench2":
            return rewardbench2_rows(rng, self.vocab, n), REWARDBENCH2_SCHEMA
        if conv == "nectar":
            return nectar_rows(rng, self.vocab, n), NECTAR_SCHEMA
        if conv == "ppe":
            k = int(entry.get("responses_per_prompt", 8))
            mmlu = "mmlu" in entry["source"]["id"].lower()
            return ppe_rows(rng, self.vocab, n, k, mmlu), ppe_schema(k, mmlu)
        if conv == "ultrafeedback":
            thresholds = tuple(entry.get("grades", {}).get("thresholds", (4, 6, 8)))
            return ultrafeedback_rows(rng, self.vocab, n, thresholds), ULTRAFEEDBACK_SCHEMA
        if conv == "rm_bench_json":
            return rm_bench_rows(rng, self.vocab, n), None
        raise ValueError(f"{section}.{cid}: no original writer for converter {conv!r}")

    def hf_datasets(self, section: str, cid: str, entry: Mapping[str, Any]) -> dict:
        source = entry["source"]
        rows, schema = self._rows(section, cid, entry)
        if schema is None:
            raise ValueError(f"{section}.{cid}: converter {source['converter']!r} has no Parquet schema here")
        config, split = source.get("config"), source["split"]
        splits = self.hf.setdefault(source["id"], {}).setdefault(config or "default", {})
        if split in splits:
            raise ValueError(f"{section}.{cid}: {source['id']} {config or 'default'}/{split} is written twice")
        splits[split] = pa.Table.from_pylist(rows, schema=schema)
        path = self.root / "hub" / "datasets" / source["id"] / _hf_folder(config) / _SPLIT_FILE.format(split=split)
        return {"kind": "hf_datasets", "files": {"repo": self.rel(self.root / "hub" / "datasets" / source["id"]),
                                                 "data": self.rel(path)},
                "repo_id": source["id"], "config": config, "split": split, "rows": {"rows": len(rows)}}

    def url(self, section: str, cid: str, entry: Mapping[str, Any]) -> dict:
        source = entry["source"]
        rows, _ = self._rows(section, cid, entry)
        name = _url_filename(source)
        path = self.root / "files" / name
        conv = source["converter"]
        if conv == "twowiki_json":
            body = _json(rows) + "\n"
        elif conv == "rm_bench_json":
            body = _json(rows, indent=4) + "\n"  # RM-Bench's data files are indented by 4
        else:
            body = _jsonl(rows)
        member = source.get("member")
        if member:
            # The releases' zips hold their files in a folder; the fetch finds a member by name suffix.
            folder = {"data_ids_april7.zip": "data_ids_april7", "musique_v1.0.zip": "data"}.get(name, Path(name).stem)
            write_bytes_atomic(path, _zip({f"{folder}/{member}": body}))
        else:
            write_text_atomic(path, body)
        return {"kind": "url", "files": {"download": self.rel(path), **({"member": member} if member else {})},
                "rows": {"rows": len(rows)}}

    # ----------------------------------------------------------------- finish

    def write_hub(self) -> None:
        for repo_id, configs in sorted(self.hf.items()):
            base = self.root / "hub" / "datasets" / repo_id
            layout: dict[str, dict[str, str]] = {}
            for config, splits in configs.items():
                for split, table in splits.items():
                    rel = f"{_hf_folder(None if config == 'default' else config)}/{_SPLIT_FILE.format(split=split)}"
                    _write_parquet(base / rel, table)
                    layout.setdefault(config, {})[split] = rel
            write_text_atomic(base / "README.md", _readme(repo_id, layout))

    def write_lucene(self) -> None:
        for index, coll in sorted(self.collections.items()):
            ids = list(coll.docs)
            self.rng(index, "order").shuffle(ids)  # no id order marks a query's documents
            beir = not index.startswith("msmarco")
            lines = []
            for d in ids:
                title, text = coll.docs[d]
                if beir:
                    # pyserini's BEIR flat indexes show "title\ntext" (rerank.raw_text); contents says the same.
                    lines.append({"id": d, "contents": f"{title}\n{text}" if title else text, "title": title, "text": text})
                else:
                    lines.append({"id": d, "contents": text})
            path = self.root / "lucene" / index / "docs.jsonl"
            write_text_atomic(path, _jsonl(lines))
            self.report["indexes"][index] = {"path": self.rel(path), "docs": len(lines)}


def write_originals(root: Path, *, queries: int = 6, docs_per_query: int = 10, seed: int = 0, pool_rows: int = 40) -> dict:
    """Write every catalogue source's synthetic original under ``root``; what was written, as JSON-ready data.

    ``queries``: prompts or questions per evaluation set (TREC DL sets: their whole fixed query
    list); ``pool_rows``: rows of each training pool; ``docs_per_query``: documents per ranked query.
    """
    w = _Writer(Path(root), queries=queries, docs_per_query=docs_per_query, seed=seed, pool_rows=pool_rows)
    handlers = {"pyserini_prebuilt": w.pyserini, "user_supplied": w.user_supplied, "hf_datasets": w.hf_datasets,
                "url": w.url}
    for section in ("datasets", "training_pools"):
        for cid, entry in w.catalogue[section].items():
            kind = entry["source"]["kind"]
            if kind not in handlers:
                raise ValueError(f"{section}.{cid}: no original writer for source kind {kind!r}")
            w.report[section][cid] = handlers[kind](section, cid, entry)
    w.write_hub()
    w.write_lucene()
    return w.report
