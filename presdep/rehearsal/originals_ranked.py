"""Ranked collections for the rehearsal's synthetic originals: documents, topics and graded judgements.

Doc ids in each collection's own style, grade plans, TREC qrels and topics text, a reference
BM25 ordering, and the names Anserini and BEIR give topics, qrels and sets.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from presdep.rehearsal.originals_text import FILLER, QUERY_TEMPLATES, Vocab, hex_id, keyed_text

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
        return "-".join(hex_id(rng, n) for n in (8, 4, 4, 4, 12))
    if style == "webis-touche2020":
        return f"{hex_id(rng, 8)}-2019-04-18T{rng.randrange(24):02d}:{rng.randrange(60):02d}:" \
               f"{rng.randrange(60):02d}Z-{rng.randrange(100000):05d}-000"
    if style == "arguana":
        return f"test-{rng.choice(('economy', 'health', 'culture', 'politics'))}-{hex_id(rng, 10)}" \
               f"-pro0{rng.randint(1, 5)}b"
    if style == "dbpedia-entity":
        return f"<dbpedia:{hex_id(rng, 10).capitalize()}>"
    if style == "climate-fever":
        return f"Topic_{hex_id(rng, 8)}"
    return hex_id(rng, 12)  # a user's own collection (legal-a, legal-b)


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
        out.topics[qid] = rng.choice(QUERY_TEMPLATES).format(*keys)
        judged = list(rng.choice(plans))[:docs_per_query]
        top = max(judged)
        grades: dict[str, int] = {}
        ids = []
        for j in range(max(docs_per_query, len(judged))):
            g = judged[j] if j < len(judged) else None
            carried = _doc_keys(g, top, keys, rng)
            did = collection.new_id(rng)
            title = f"{carried[0].capitalize()} {rng.choice(FILLER)}" if titles else ""
            collection.docs[did] = (title, keyed_text(rng, carried, rng.randint(2, 4)))
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
        out.topics[qid] = rng.choice(QUERY_TEMPLATES).format(*vocab.words(3))
    return out


def qrels_lines(grades: Mapping[str, Mapping[str, int]], iteration: str = "0", sep: str = " ") -> str:
    return "".join(f"{q}{sep}{iteration}{sep}{d}{sep}{g}\n" for q, dg in grades.items() for d, g in dg.items())


def topics_tsv(topics: Mapping[str, str]) -> str:
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
BEIR_GRADED = {"trec-covid", "nfcorpus", "dbpedia-entity", "webis-touche2020", "signal1m", "trec-news", "robust04"}

