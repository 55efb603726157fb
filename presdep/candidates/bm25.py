"""BM25 first stage: a Lucene index built by Anserini (pyserini's backend) and batch search.

Two deliberate choices:

- Indexing runs ``python -m pyserini.index.lucene`` in a subprocess, with JAVA_HOME set
  to a Java >= 21 (:mod:`presdep.runtime.java`); its log is forwarded line by line.
- Search talks to Anserini's ``SimpleSearcher`` through pyjnius (``pyserini.pyclass``),
  the Java class pyserini's ``LuceneSearcher`` wraps. Importing ``pyserini.search.lucene``
  in pyserini 1.6 also imports its dense encoders, which build an OpenAI client at import
  time (failing without OPENAI_API_KEY) and pull in torch; the Java class needs neither.

The index uses Anserini's defaults for English (Porter stemming, Lucene's English
stopwords), i.e. the "flat" BM25 of the BEIR and MS MARCO regressions.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, Mapping

import polars as pl
import yaml
from tqdm import tqdm

from presdep import __version__
from presdep.contracts.errors import InvalidInput, PresdepError
from presdep.contracts.json_artifacts import read_json_artifact, write_json_artifact
from presdep.contracts.schemas import SCHEMAS, read_table, write_table, write_text_atomic
from presdep.data.corpus import beir_corpus_file, iter_corpus, lookup_docs, read_queries, source_location
from presdep.data.trec import write_run
from presdep.runtime.java import MIN_JAVA, anserini_autoclass, ensure_java, java_version

log = logging.getLogger(__name__)

STATS_FILE = "presdep_index.json"  # written last: its presence marks a complete index
INDEX_LAYOUT = 1  # bump when the JsonCollection conversion or indexer flags change

FIRST_STAGE_SCHEMA = SCHEMAS["first_stage"]


class IndexBuildError(PresdepError, RuntimeError):
    """The index cannot be built, is incomplete, or belongs to another corpus."""


# --------------------------------------------------------------------------- indexing


def _corpus_fingerprint(corpus_path: str | Path, corpus_format: str) -> dict[str, Any]:
    if corpus_format == "irds":
        return {"format": "irds", "id": str(corpus_path)}
    file = beir_corpus_file(corpus_path) if corpus_format == "beir" else Path(corpus_path)
    if not file.is_file():
        raise FileNotFoundError(f"corpus file not found: {file}")
    # Size, not mtime: copying a corpus must not invalidate its index.
    return {"format": corpus_format, "file": str(file.resolve()), "size_bytes": file.stat().st_size}


def _write_json_collection(corpus_path: str | Path, corpus_format: str, out_dir: Path) -> int:
    """The corpus as pyserini's JsonCollection ({"id", "contents"} per line); returns the doc count."""
    out_dir.mkdir(parents=True)
    n = 0
    with open(out_dir / "docs.jsonl", "w", encoding="utf-8") as fh:
        for doc in tqdm(iter_corpus(corpus_path, corpus_format), desc="convert corpus", unit="doc", file=sys.stderr, mininterval=5):
            fh.write(json.dumps({"id": doc.doc_id, "contents": doc.contents}, ensure_ascii=False))
            fh.write("\n")
            n += 1
    if n == 0:
        raise IndexBuildError(f"corpus {corpus_path} ({corpus_format}) has no documents")
    return n


def run_indexer(collection_dir: Path, index_dir: Path, threads: int, java_home: Path) -> None:
    """pyserini's own Lucene indexer over a JsonCollection folder (positions, doc vectors, raw JSON)."""
    cmd = [
        sys.executable, "-m", "pyserini.index.lucene",
        "--collection", "JsonCollection",
        "--input", str(collection_dir),
        "--index", str(index_dir),
        "--generator", "DefaultLuceneDocumentGenerator",
        "--threads", str(max(1, int(threads))),
        # positions and doc vectors make phrase queries, RM3 and doc statistics possible;
        # the raw JSON lets anyone recover the indexed text from the index alone.
        "--storePositions", "--storeDocvectors", "--storeRaw",
    ]
    env = dict(os.environ, JAVA_HOME=str(java_home), PATH=f"{java_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    log.info("indexing: %s", " ".join(cmd))
    tail: deque[str] = deque(maxlen=40)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            sys.stderr.write(line)
        rc = proc.wait()
    if rc != 0:
        raise IndexBuildError(f"Anserini indexer exited with status {rc}; last output:\n" + "\n".join(tail))


def index_stats(index_dir: str | Path) -> dict[str, int]:
    """Lucene statistics: documents, non_empty_documents, unique_terms, total_terms."""
    autoclass = anserini_autoclass()
    utils = autoclass("io.anserini.index.IndexReaderUtils")
    reader = utils.getReader(str(index_dir))
    try:
        stats = utils.getIndexStats(reader)
        return {str(k): int(stats.get(k)) for k in stats.keySet().toArray()}
    finally:
        reader.close()


def read_index_info(index_dir: str | Path) -> dict[str, Any]:
    """The build record of a complete index (raises if the index is incomplete)."""
    path = Path(index_dir) / STATS_FILE
    if not path.is_file():
        raise IndexBuildError(f"{index_dir} is not a complete presdep index (no {STATS_FILE})")
    return read_json_artifact(path, "BM25 index build record")  # verified: retrieve trusts its corpus fingerprint


def build_index(
    corpus_path: str | Path,
    corpus_format: str,
    index_dir: str | Path,
    threads: int = 1,
) -> dict[str, Any]:
    """Build a Lucene BM25 index of a corpus at ``index_dir`` and return its build record.

    The index is built in a temporary sibling folder and renamed into place, so a killed
    build leaves nothing at ``index_dir``. An existing complete index of the same corpus
    is reused as is; one of a different corpus is an error (delete it to rebuild).
    """
    index_dir = Path(index_dir)
    fingerprint = _corpus_fingerprint(corpus_path, corpus_format)
    wanted = {"corpus": fingerprint, "layout": INDEX_LAYOUT}
    if index_dir.is_dir() and not any(index_dir.iterdir()):
        index_dir.rmdir()  # an empty folder (e.g. made by a workflow engine) is no index
    if index_dir.exists():
        if not (index_dir / STATS_FILE).is_file():
            raise IndexBuildError(
                f"{index_dir} exists but is not a complete presdep index (no {STATS_FILE}); remove it to rebuild"
            )
        info = read_index_info(index_dir)
        have = {"corpus": info.get("corpus"), "layout": info.get("layout")}
        if have != wanted:
            raise IndexBuildError(
                f"{index_dir} was built from {have}, not {wanted}; remove it to rebuild"
            )
        log.info("reusing complete index at %s (%s documents)", index_dir, info["stats"].get("documents"))
        return info

    java_home = ensure_java(MIN_JAVA)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.", suffix=".tmp", dir=index_dir.parent))
    try:
        n_docs = _write_json_collection(corpus_path, corpus_format, work / "collection")
        tmp_index = work / "index"
        run_indexer(work / "collection", tmp_index, threads, java_home)
        stats = index_stats(tmp_index)
        if stats.get("documents") != n_docs:
            raise IndexBuildError(f"indexer stored {stats.get('documents')} documents, the corpus has {n_docs}")
        info = {
            **wanted,
            "stats": stats,
            "indexer": {
                "pyserini": _version("pyserini"),
                "java": java_version(java_home),
                "collection": "JsonCollection",
                "generator": "DefaultLuceneDocumentGenerator",
                "analyzer": "Anserini default English (Porter stemmer, Lucene English stopwords)",
                "contents": "title + newline + text",
                "stored": ["positions", "docvectors", "raw"],
            },
            "presdep_version": __version__,
            "build_seconds": round(time.perf_counter() - start, 3),
        }
        write_json_artifact(tmp_index / STATS_FILE, info)
        os.replace(tmp_index, index_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("built index %s: %s in %.1f s", index_dir, stats, info["build_seconds"])
    return info


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- search


def search(
    index_dir: str | Path,
    topics: Mapping[str, str],
    k: int = 100,
    k1: float = 0.9,
    b: float = 0.4,
    threads: int = 1,
    batch_size: int = 1000,
) -> pl.DataFrame:
    """BM25 top-``k`` per query -> query_id, doc_id, rank (int32, 1-based), score (float64).

    Ranks follow Anserini's order (score descending, ties by doc id). Queries with no
    matching term get no rows; they are counted in the log.
    """
    if k < 1:
        raise InvalidInput(f"k must be >= 1, got {k}")
    read_index_info(index_dir)  # refuse half-built folders with a clear message
    autoclass = anserini_autoclass()
    JArrayList = autoclass("java.util.ArrayList")
    searcher = autoclass("io.anserini.search.SimpleSearcher")(str(index_dir))
    qids_out: list[str] = []
    dids: list[str] = []
    ranks: list[int] = []
    scores: list[float] = []
    empty = 0
    try:
        searcher.set_bm25(float(k1), float(b))
        items = list(topics.items())
        with tqdm(total=len(items), desc="bm25", unit="q", file=sys.stderr, mininterval=5) as bar:
            for start in range(0, len(items), batch_size):
                chunk = items[start:start + batch_size]
                jq, jid = JArrayList(), JArrayList()
                for qid, text in chunk:
                    jq.add(text)
                    jid.add(qid)
                results = searcher.batch_search(jq, jid, int(k), int(threads))
                for qid, _ in chunk:  # topic order, not the Java map's order
                    hits = results.get(qid)
                    if hits is None or len(hits) == 0:
                        empty += 1
                        continue
                    for rank, hit in enumerate(hits, start=1):
                        qids_out.append(qid)
                        dids.append(hit.docid)
                        ranks.append(rank)
                        scores.append(float(hit.score))
                bar.update(len(chunk))
    finally:
        searcher.close()
    if empty:
        log.warning("%d of %d queries retrieved no document", empty, len(topics))
    return pl.DataFrame(
        {"query_id": qids_out, "doc_id": dids, "rank": ranks, "score": scores},
        schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int32, "score": pl.Float64},
    )


# --------------------------------------------------------------------------- outputs


def check_first_stage(df: pl.DataFrame, where: str = "first stage") -> None:
    """Contract checks beyond types: unique (query, doc), ranks 1..n, scores not increasing."""
    missing = [c for c in FIRST_STAGE_SCHEMA.names if c not in df.columns]
    if missing:
        raise InvalidInput(f"{where}: missing column(s) {missing}")
    dup = df.select("query_id", "doc_id").is_duplicated()
    if dup.any():
        row = int(dup.arg_max())
        raise InvalidInput(f"{where}: document {df['doc_id'][row]!r} listed twice for query {df['query_id'][row]!r}")
    bad = (
        df.sort("query_id", "rank")
        .with_columns(
            expected=pl.int_range(1, pl.len() + 1).over("query_id"),
            prev=pl.col("score").shift(1).over("query_id"),
        )
        .filter((pl.col("rank") != pl.col("expected")) | (pl.col("score") > pl.col("prev")))
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise InvalidInput(f"{where}: query {r['query_id']!r} rank {r['rank']} breaks ranks 1..n with non-increasing scores")


def write_first_stage(df: pl.DataFrame, path: str | Path, params: Mapping[str, Any] | None = None, **meta: Any) -> Path:
    """Write the first_stage contract atomically with presdep provenance metadata."""
    check_first_stage(df, str(path))
    return write_table(df, path, "first_stage", params, **meta)


def read_first_stage(path: str | Path) -> pl.DataFrame:
    return read_table(path, "first_stage")


def write_trec_run(df: pl.DataFrame, path: str | Path, tag: str = "presdep-bm25") -> Path:
    """``qid Q0 docid rank score tag`` lines, by query then rank (atomic write)."""
    if not tag or any(c.isspace() for c in tag):
        raise InvalidInput(f"run tag must be one non-empty word, got {tag!r}")
    check_first_stage(df, str(path))
    return write_run(df.sort("query_id", "rank"), path, tag)


def write_dataset_meta(
    path: str | Path,
    retriever: str,
    params: Mapping[str, Any],
    index_stats: Mapping[str, Any],
    **extra: Any,
) -> Path:
    """``results/{dataset}/dataset_meta.yaml``: how the candidates were produced."""
    meta = {
        "presdep_version": __version__,
        "retriever": retriever,
        "params": dict(params),
        "index": dict(index_stats),
        **extra,
    }
    return write_text_atomic(path, yaml.safe_dump(meta, sort_keys=False, allow_unicode=True))


def run_first_stage(
    index_dir: str | Path,
    topics_path: str | Path,
    topics_format: str,
    out_parquet: str | Path,
    out_trec: str | Path,
    out_meta: str | Path,
    *,
    k: int = 100,
    k1: float = 0.9,
    b: float = 0.4,
    threads: int = 1,
    topics_split: str | None = "test",
    topics_field: str | None = None,
    dataset: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> pl.DataFrame:
    """Topics -> BM25 search -> first_stage.parquet, a TREC run and dataset_meta.yaml."""
    topics = read_queries(topics_path, topics_format, split=topics_split, field=topics_field)
    start = time.perf_counter()
    df = search(index_dir, topics, k=k, k1=k1, b=b, threads=threads)
    seconds = time.perf_counter() - start
    bm25 = {"k": k, "k1": k1, "b": b}
    write_first_stage(df, out_parquet, {**bm25, **(params or {})}, dataset=dataset)
    write_trec_run(df, out_trec, tag="presdep-bm25")
    info = read_index_info(index_dir)
    write_dataset_meta(
        out_meta,
        "bm25-lucene-flat",
        {**bm25, **(params or {})},
        {**info["stats"], "corpus": info["corpus"], "indexer": info["indexer"]},
        dataset=dataset,
        topics={
            "path": str(topics_path),
            "format": topics_format,
            "queries": len(topics),
            "queries_with_hits": df["query_id"].n_unique(),
        },
        search_seconds=round(seconds, 3),
    )
    log.info("retrieved %d rows for %d queries in %.1f s", df.height, len(topics), seconds)
    return df


def first_stage_candidates(
    first_stage_df: pl.DataFrame,
    corpus_path: str | Path | Mapping[str, Any],
    corpus_format: str | None = None,
    topics: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Join query and document texts onto a first-stage run: the candidates contract.

    Either ``(run, corpus_path, corpus_format, topics)``, or ``(run, source)`` with a
    ``candidates:`` config entry holding ``corpus`` and ``topics`` sources. Document
    text is the indexed contents (title, newline, text). Every query and document of
    the run must exist in the topics and the corpus. Ranks are kept as given (a run
    from elsewhere may not number them 1..n); they must be unique per query.
    """
    ids_from = None  # the run file, named when a corpus lacks its documents
    if isinstance(corpus_path, Mapping):
        source = corpus_path
        ids_from = source.get("run")
        for key in ("corpus", "topics"):
            if key not in source:
                raise InvalidInput(f"candidates source lacks {key!r} (needed to join texts): {dict(source)}")
        topics_src = source["topics"]
        topics = read_queries(
            source_location(topics_src), topics_src["format"], split=topics_src["split"], field=topics_src.get("field")
        )
        corpus_format = source["corpus"]["format"]
        corpus_path = source_location(source["corpus"])
    if corpus_format is None or topics is None:
        raise TypeError("first_stage_candidates needs corpus_format and topics (or a source mapping)")
    missing = [c for c in FIRST_STAGE_SCHEMA.names if c not in first_stage_df.columns]
    if missing:
        raise InvalidInput(f"first-stage run lacks column(s) {missing}")
    for cols, what in ((["query_id", "doc_id"], "document"), (["query_id", "rank"], "rank")):
        dup = first_stage_df.select(cols).is_duplicated()
        if dup.any():
            row = first_stage_df.row(int(dup.arg_max()), named=True)
            raise InvalidInput(f"first-stage run: {what} {row[cols[1]]!r} repeats for query {row['query_id']!r}")
    missing_q = sorted(set(first_stage_df["query_id"].unique().to_list()) - set(topics))
    if missing_q:
        raise KeyError(f"{len(missing_q)} query id(s) of the run are not in the topics, e.g. {missing_q[:5]}")
    docs = lookup_docs(corpus_path, corpus_format, first_stage_df["doc_id"].unique().to_list(), ids_from=ids_from)
    df = first_stage_df.sort("query_id", "rank")
    return pl.DataFrame(
        {
            "query_id": df["query_id"],
            "query": [topics[q] for q in df["query_id"].to_list()],
            "doc_id": df["doc_id"],
            "doc": [docs[d].contents for d in df["doc_id"].to_list()],
            "first_stage_rank": df["rank"].cast(pl.Int32),
            "first_stage_score": df["score"].cast(pl.Float64),
        },
        schema={
            "query_id": pl.String, "query": pl.String, "doc_id": pl.String, "doc": pl.String,
            "first_stage_rank": pl.Int32, "first_stage_score": pl.Float64,
        },
    )
