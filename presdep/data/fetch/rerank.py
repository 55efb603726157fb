"""Reranking sources -> :class:`RankedQuery` lists (rank_llm JSON + TREC qrels) or a BEIR folder.

- ``pyserini_prebuilt``: pyserini's prebuilt Lucene index (downloaded and cached by pyserini,
  or a local unpacked copy), its bundled topics and qrels, and BM25 top-k with the catalogue's
  k1/b through pyserini's own ``LuceneSearcher``: the published ``bm25-default`` and BEIR
  flat runs (Anserini's SimpleSearcher, the engine under pyserini's LuceneSearcher).
  Passage text comes from the index's stored raw documents. Anserini fetches the named
  topics and qrels from anserini-tools on first use and caches them.
- ``rank_llm_json`` (local): rank_llm's retrieve-results JSON + TREC qrels, verified and
  copied in the same format.
- ``beir`` (local): a BEIR folder (``corpus.jsonl[.gz]``, ``queries.jsonl``, ``qrels/test.tsv``)
  copied for our own index, the queries limited to those judged in the split.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

from presdep.contracts.errors import InputFormatError
from presdep.contracts.schemas import atomic_write
from presdep.data.beir import read_beir_qrels
from presdep.data.corpus import beir_corpus_file, read_beir_queries
from presdep.data.fetch.common import FetchError, RankedQuery
from presdep.data.rank_llm import read_rank_llm_json
from presdep.data.trec import read_qrels
from presdep.runtime.java import MIN_JAVA, anserini_autoclass, ensure_java

log = logging.getLogger(__name__)


def raw_text(raw: str) -> str:
    """A stored raw document as shown to a scorer (title and text on separate lines)."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    if not isinstance(obj, dict):
        return raw
    for key in ("contents", "passage"):
        if key in obj:
            return str(obj[key])
    title, text = str(obj.get("title") or ""), str(obj.get("text") or "")
    return f"{title}\n{text}" if title.strip() else text


def _index_dir(index: str, mirror: Mapping[str, str] | None = None) -> tuple[str, dict]:
    """A local index folder as is, or pyserini's prebuilt index (downloaded once into its cache).

    ``mirror`` ({url, md5, size}: a config's ``catalogue_overrides``) points pyserini's own download at
    another copy of the tarball. That is the one change made to pyserini: its index table's URLs
    and md5 for this index, for this process; the manifest records it.
    """
    if Path(index).is_dir():
        return str(index), {"index_dir": str(index)}
    ensure_java(MIN_JAVA)
    from pyserini.prebuilt_index_info import TF_INDEX_INFO
    from pyserini.util import download_prebuilt_index

    if index not in TF_INDEX_INFO:
        raise FetchError(f"{index!r} is not one of pyserini's prebuilt Lucene indexes")
    info = TF_INDEX_INFO[index]
    version = {"prebuilt": index, "filename": info.get("filename"), "md5": info.get("md5")}
    if mirror:
        version["mirror"] = {"url": mirror["url"], "md5": mirror["md5"], "replaces_urls": list(info.get("urls") or [])}
        # pyserini checks the size too: the mirror's, or none when the mirror gives none.
        info.update({"urls": [mirror["url"]], "md5": mirror["md5"], "size compressed (bytes)": mirror.get("size")})
        version["md5"] = mirror["md5"]
    try:
        path = download_prebuilt_index(index)
    except (ValueError, AssertionError, OSError) as exc:  # pyserini: no URL answered / md5 mismatch
        where = mirror["url"] if mirror else ", ".join(info.get("urls") or [])
        raise FetchError(f"prebuilt index {index!r}: could not download or verify it from {where}: {exc}") from exc
    return str(path), version


def pyserini_topics(name: str) -> dict[str, str]:
    """pyserini's bundled topics: query id -> title (the query text)."""
    ensure_java(MIN_JAVA)
    from pyserini.search import get_topics

    return {str(q): str(t.get("title") or t.get("text") or "") for q, t in get_topics(name).items()}


def pyserini_qrels_file(name: str) -> Path:
    ensure_java(MIN_JAVA)
    from pyserini.search import get_qrels_file

    return Path(get_qrels_file(name))


def read_grades(path: str | Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for q, d, r in read_qrels(path).select("query_id", "doc_id", "relevance").iter_rows():
        out.setdefault(q, {})[d] = int(r)
    return out


def bm25_ranked(index: str, topics: Mapping[str, str], grades: Mapping[str, Mapping[str, int]], *,
                k: int, k1: float, b: float, threads: int = 4,
                mirror: Mapping[str, str] | None = None) -> tuple[list[RankedQuery], dict]:
    """BM25 top-k of the judged topics over a Lucene index, with stored passage text."""
    judged = [q for q in topics if q in grades]
    if not judged:
        raise FetchError(f"no topic of {index!r} has a judgement")
    index_dir, version = _index_dir(index, mirror)
    # Anserini's searcher through pyjnius, as pyserini's LuceneSearcher does (importing
    # pyserini.search.lucene would import its OpenAI encoder, which needs a key at import).
    autoclass = anserini_autoclass()
    JArrayList = autoclass("java.util.ArrayList")
    searcher = autoclass("io.anserini.search.SimpleSearcher")(index_dir)
    out = []
    try:
        searcher.set_bm25(float(k1), float(b))
        jq, jid = JArrayList(), JArrayList()
        for q in judged:
            jq.add(topics[q])
            jid.add(q)
        results = searcher.batch_search(jq, jid, int(k), int(threads))
        for q in judged:
            hits = results.get(q)
            docs = []
            for h in (hits if hits is not None else []):
                doc = searcher.doc(h.docid)  # the Lucene document; "raw" is the stored JSON
                raw = doc.get("raw") if doc is not None else None
                if raw is None:
                    raise FetchError(f"index {index!r} stores no text for document {h.docid!r}")
                docs.append((str(h.docid), raw_text(raw), float(h.score)))
            if not docs:
                log.warning("%s: query %s retrieved nothing", index, q)
                continue
            out.append(RankedQuery(q, topics[q], docs, dict(grades[q])))
    finally:
        searcher.close()
    return out, version


def rank_llm_local(candidates: str | Path, qrels: str | Path) -> list[RankedQuery]:
    """A local rank_llm JSON + TREC qrels, read by the project's strict readers."""
    cands = read_rank_llm_json(candidates)
    grades = read_grades(qrels)
    out = []
    for (qid,), g in cands.group_by(["query_id"], maintain_order=True):  # queries in file order
        g = g.sort("first_stage_rank")
        docs = [(d, t, float(s)) for d, t, s in g.select("doc_id", "doc", "first_stage_score").iter_rows()]
        out.append(RankedQuery(str(qid), str(g["query"][0]), docs, dict(grades.get(str(qid), {}))))
    return out


def copy_beir_folder(src: str | Path, out_dir: str | Path, split: str = "test") -> dict[str, int]:
    """A BEIR folder -> ``out_dir/{corpus.jsonl,queries.jsonl,qrels/<split>.tsv}``; queries judged in the split only."""
    src, out_dir = Path(src), Path(out_dir)
    if not src.is_dir():
        raise FetchError(f"{src}: expected a BEIR folder (corpus.jsonl[.gz], queries.jsonl, qrels/{split}.tsv)")
    qrels_src = src / "qrels" / f"{split}.tsv"
    if not qrels_src.is_file():
        raise InputFormatError(src, "folder", f"has no qrels/{split}.tsv")
    judged = read_beir_qrels(src, split)
    topics = read_beir_queries(src, split)  # refuses judged queries missing from queries.jsonl
    corpus = beir_corpus_file(src)
    opener = gzip.open if corpus.suffix == ".gz" else open

    def copy_corpus(tmp: Path) -> None:
        with opener(corpus, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout)

    atomic_write(out_dir / "corpus.jsonl", copy_corpus)
    lines = [json.dumps({"_id": q, "text": t}, ensure_ascii=False) for q, t in topics.items()]
    atomic_write(out_dir / "queries.jsonl", lambda tmp: tmp.write_text("\n".join(lines) + "\n", encoding="utf-8"))
    atomic_write(out_dir / "qrels" / f"{split}.tsv", lambda tmp: shutil.copyfile(qrels_src, tmp))
    with open(out_dir / "corpus.jsonl", "rb") as fh:
        n_docs = sum(1 for line in fh if line.strip())
    return {"documents": n_docs, "queries": len(topics), "judgements": judged.height}
