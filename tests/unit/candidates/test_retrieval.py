"""BM25 first stage: corpus readers, Lucene index build/reuse, search, outputs, the Snakemake rules."""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from presdep.contracts.errors import InputFormatError
from presdep.data.corpus import Doc, iter_corpus, lookup_docs, read_queries
from presdep.runtime.java import JavaNotFoundError, find_java_home

REPO = Path(__file__).resolve().parents[3]


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- readers (no Java)


@pytest.mark.parametrize(
    "bad_line,problem",
    [
        ('{"_id": "d3", "title": "x", "text": "unterminated', "invalid JSON"),
        ('{"title": "x", "text": "no id"}', "missing document id"),
        ('{"_id": "d3", "title": "only a title"}', "missing document text"),
        ('["_id", "d3"]', "expected a JSON object"),
        ('{"_id": "d1", "title": "", "text": "again"}', "appears twice"),
        ('{"_id": "d3", "title": "", "text": "  "}', "neither title nor text"),
    ],
)
def test_bad_corpus_line_names_file_and_line(tmp_path: Path, bad_line: str, problem: str) -> None:
    corpus = _write_jsonl(
        tmp_path / "corpus.jsonl",
        [{"_id": "d1", "title": "t", "text": "one"}, {"_id": "d2", "title": "t", "text": "two"}, bad_line],
    )
    with pytest.raises(InputFormatError) as err:
        list(iter_corpus(tmp_path, "beir"))
    msg = str(err.value)
    assert str(corpus) in msg and "line 3" in msg and problem in msg


def test_corrupt_gzip_corpus_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write('{"_id": "a", "text": "ok"}\n\n{"_id": "b", "text": "ok"}\n{"_id": "c", "text": }\n')
    with pytest.raises(InputFormatError, match=r"corpus\.jsonl\.gz, line 4: invalid JSON"):
        list(iter_corpus(tmp_path, "beir"))


def test_jsonl_format_accepts_pyserini_keys(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "docs.jsonl", [{"id": "x", "contents": "alpha"}, {"docid": 7, "title": "T", "text": "beta"}])
    assert list(iter_corpus(path, "jsonl")) == [Doc("x", "", "alpha"), Doc("7", "T", "beta")]
    assert Doc("7", "T", "beta").contents == "T\nbeta" and Doc("x", "", "alpha").contents == "alpha"
    # the beir format is strict about BEIR's own field names
    with pytest.raises(InputFormatError, match="line 1: missing document id"):
        list(iter_corpus(path, "beir"))


def test_beir_queries_restricted_to_split_qrels(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "queries.jsonl", [{"_id": "1", "text": "q one"}, {"_id": "2", "text": "q two"}, {"_id": "3", "text": "q three"}])
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n3\td1\t1\n1\td2\t2\n")
    assert read_queries(tmp_path, "beir") == {"1": "q one", "3": "q three"}
    assert read_queries(tmp_path, "beir", split=None) == {"1": "q one", "2": "q two", "3": "q three"}
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n9\td1\t1\n")
    with pytest.raises(InputFormatError, match="not in"):
        read_queries(tmp_path, "beir")


def test_lookup_docs_reports_missing(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "title": "", "text": "x"}])
    assert lookup_docs(tmp_path, "beir", ["a"])["a"].text == "x"
    with pytest.raises(KeyError, match="'zz'"):
        lookup_docs(tmp_path, "beir", ["a", "zz"])


# --------------------------------------------------------------------------- Lucene (needs Java >= 21)


@pytest.fixture(scope="session")
def java_ok() -> Path:
    try:
        return find_java_home(21)
    except JavaNotFoundError as exc:
        pytest.skip(f"pyserini needs Java >= 21: {exc}")


# Words the Porter stemmer leaves alone and Lucene's English stopword list lacks, so the
# brute-force BM25 below can tokenise by whitespace.
TINY = [
    {"_id": "d1", "title": "zebra", "text": "zebra grass river"},
    {"_id": "d2", "title": "", "text": "lion grass grass tree"},
    {"_id": "d3", "title": "bird", "text": "river tree bird bird bird"},
    {"_id": "d4", "title": "lion", "text": "zebra lion"},
    {"_id": "d5", "title": "", "text": "tree"},
]


def _tiny_beir(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _write_jsonl(folder / "corpus.jsonl", TINY)
    _write_jsonl(folder / "queries.jsonl", [{"_id": "q1", "text": "zebra lion"}, {"_id": "q2", "text": "bird river"}, {"_id": "q3", "text": "unicorn"}])
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td4\t2\nq2\td3\t1\nq3\td1\t1\n")
    return folder


def _brute_bm25(query: str, k1: float, b: float) -> dict[str, float]:
    """Lucene's BM25 (no (k1+1) factor since Lucene 8) over whitespace tokens of title+text."""
    docs = {d["_id"]: (d["title"] + " " + d["text"]).split() for d in TINY}
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    out: dict[str, float] = {}
    for did, toks in docs.items():
        s = 0.0
        for term in query.split():
            tf = toks.count(term)
            if tf:
                df = sum(term in t for t in docs.values())
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf / (tf + k1 * (1 - b + b * len(toks) / avgdl))
        if s:
            out[did] = s
    return out


@pytest.fixture(scope="module")
def tiny_index(java_ok: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from presdep.candidates.bm25 import build_index

    root = tmp_path_factory.mktemp("tiny")
    data = _tiny_beir(root / "beir")
    build_index(data, "beir", root / "index", threads=1)
    return data, root / "index"


def test_tiny_index_stats_and_atomicity(tiny_index: tuple[Path, Path]) -> None:
    from presdep.candidates.bm25 import read_index_info

    _, index = tiny_index
    info = read_index_info(index)
    assert info["stats"]["documents"] == len(TINY)
    # unique terms over title+text after analysis
    assert info["stats"]["unique_terms"] == len({w for d in TINY for w in (d["title"] + " " + d["text"]).split()})
    assert not [p for p in index.parent.iterdir() if p.name.startswith(".index.")]  # temp dir cleaned


@pytest.mark.parametrize("k1,b", [(0.9, 0.4), (1.2, 0.75)])
def test_search_matches_brute_force_bm25(tiny_index: tuple[Path, Path], k1: float, b: float) -> None:
    from presdep.candidates.bm25 import search

    _, index = tiny_index
    topics = {"q1": "zebra lion", "q2": "bird river", "q3": "unicorn"}
    df = search(index, topics, k=10, k1=k1, b=b)
    assert df.schema == {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int32, "score": pl.Float64}
    assert "q3" not in df["query_id"].to_list()  # no matching term: no rows
    for qid in ("q1", "q2"):
        got = df.filter(pl.col("query_id") == qid).sort("rank")
        want = _brute_bm25(topics[qid], k1, b)
        assert got["rank"].to_list() == list(range(1, len(want) + 1))
        assert set(got["doc_id"]) == set(want)
        for did, score in zip(got["doc_id"], got["score"]):
            assert score == pytest.approx(want[did], abs=2e-4)  # Anserini rounds to 4 decimals
        expected_order = sorted(want, key=lambda d: (-round(want[d], 4), d))
        assert got["doc_id"].to_list() == expected_order


def test_search_top_k_cut(tiny_index: tuple[Path, Path]) -> None:
    from presdep.candidates.bm25 import search

    df = search(tiny_index[1], {"q": "tree grass"}, k=2)
    assert df["rank"].to_list() == [1, 2]


def test_rebuild_reuses_index(tiny_index: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    from presdep.candidates.bm25 import build_index

    data, index = tiny_index
    before = {p.name: p.stat().st_mtime_ns for p in index.iterdir()}
    start = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="presdep.candidates.bm25"):
        info = build_index(data, "beir", index, threads=1)
    assert time.perf_counter() - start < 1.0
    assert "reusing complete index" in caplog.text
    assert info["stats"]["documents"] == len(TINY)
    assert {p.name: p.stat().st_mtime_ns for p in index.iterdir()} == before


def test_existing_index_of_other_corpus_or_incomplete_is_refused(tiny_index: tuple[Path, Path], tmp_path: Path) -> None:
    from presdep.candidates.bm25 import IndexBuildError, build_index, search

    data, index = tiny_index
    other = tmp_path / "other"
    other.mkdir()
    _write_jsonl(other / "corpus.jsonl", TINY[:2])
    with pytest.raises(IndexBuildError, match="remove it to rebuild"):
        build_index(other, "beir", index)
    half = tmp_path / "half"
    half.mkdir()
    (half / "segments_1").write_bytes(b"")
    with pytest.raises(IndexBuildError, match="not a complete presdep index"):
        build_index(data, "beir", half)
    with pytest.raises(IndexBuildError, match="not a complete presdep index"):
        search(half, {"q": "zebra"})


def test_corrupt_corpus_leaves_no_index(java_ok: Path, tmp_path: Path) -> None:
    from presdep.candidates.bm25 import build_index

    _write_jsonl(tmp_path / "corpus.jsonl", [TINY[0], '{"_id": "d2", "text": "broken'])
    with pytest.raises(InputFormatError, match="line 2: invalid JSON"):
        build_index(tmp_path, "beir", tmp_path / "idx")
    assert not (tmp_path / "idx").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.jsonl"]


def test_outputs_round_trip(tiny_index: tuple[Path, Path], tmp_path: Path) -> None:
    from presdep.candidates.bm25 import first_stage_candidates, read_first_stage, run_first_stage
    from presdep.contracts.schemas import read_metadata
    from presdep.data.trec import read_run

    data, index = tiny_index
    out = tmp_path / "res"
    df = run_first_stage(index, data, "beir", out / "fs.parquet", out / "fs.trec", out / "meta.yaml", k=3, k1=0.9, b=0.4, dataset="tiny")
    assert read_first_stage(out / "fs.parquet").equals(df)
    assert read_metadata(out / "fs.parquet")["params"] == {"k": 3, "k1": 0.9, "b": 0.4}
    run = read_run(out / "fs.trec")
    assert run.sort("query_id", "rank").select("query_id", "doc_id", "rank").equals(df.sort("query_id", "rank").select("query_id", "doc_id", "rank"))
    assert (run.sort("query_id", "rank")["score"] - df.sort("query_id", "rank")["score"]).abs().max() < 1e-6
    meta = yaml.safe_load((out / "meta.yaml").read_text())
    assert meta["retriever"] == "bm25-lucene-flat" and meta["index"]["documents"] == len(TINY)
    assert meta["topics"] == {"path": str(data), "format": "beir", "queries": 3, "queries_with_hits": 2}

    topics = read_queries(data, "beir")
    cands = first_stage_candidates(df, data, "beir", topics)
    assert cands.columns == ["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"]
    row = cands.filter((pl.col("query_id") == "q2") & (pl.col("first_stage_rank") == 1)).row(0, named=True)
    assert row["doc_id"] == "d3" and row["doc"] == "bird\nriver tree bird bird bird" and row["query"] == "bird river"
    with pytest.raises(KeyError, match="not in the topics"):
        first_stage_candidates(df, data, "beir", {"q1": "zebra lion"})
    # the form the fixture builder uses: the Parquet as read by polars + the candidates config entry
    source = {"format": "bm25", "corpus": {"format": "beir", "path": str(data)}, "topics": {"format": "beir", "path": str(data), "split": "test"}}
    assert first_stage_candidates(pl.read_parquet(out / "fs.parquet"), source).equals(cands)
    # a run from elsewhere keeps its rank numbers, but a rank may not repeat within a query
    gappy = df.with_columns(pl.col("rank") * 10)
    assert first_stage_candidates(gappy, source)["first_stage_rank"].to_list() == (cands["first_stage_rank"] * 10).to_list()
    with pytest.raises(ValueError, match="rank 1 repeats for query 'q1'"):
        first_stage_candidates(df.with_columns(pl.lit(1, pl.Int32).alias("rank")), source)


def test_first_stage_checks_reject_bad_runs(tmp_path: Path) -> None:
    from presdep.candidates.bm25 import write_first_stage

    bad_rank = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "b"], "rank": [1, 3], "score": [2.0, 1.0]})
    with pytest.raises(ValueError, match="rank 3"):
        write_first_stage(bad_rank, tmp_path / "x.parquet")
    rising = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "b"], "rank": [1, 2], "score": [1.0, 2.0]})
    with pytest.raises(ValueError, match="non-increasing"):
        write_first_stage(rising, tmp_path / "x.parquet")
    dup = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "a"], "rank": [1, 2], "score": [2.0, 1.0]})
    with pytest.raises(ValueError, match="listed twice"):
        write_first_stage(dup, tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()


# --------------------------------------------------------------------------- SciFact (real data)


def test_scifact_bm25_ndcg(java_ok: Path, shared_data: Path, tmp_path: Path) -> None:
    import pytrec_eval

    from presdep.candidates.bm25 import build_index, first_stage_candidates, search
    from presdep.data.beir import read_beir_qrels

    folder = shared_data / "beir-scifact"
    start = time.perf_counter()
    info = build_index(folder, "beir", tmp_path / "index", threads=2)
    build_s = time.perf_counter() - start
    assert info["stats"]["documents"] == 5183
    topics = read_queries(folder, "beir")
    assert len(topics) == 300
    start = time.perf_counter()
    run = search(tmp_path / "index", topics, k=100, k1=0.9, b=0.4, threads=2)
    search_s = time.perf_counter() - start
    assert run.group_by("query_id").len()["len"].max() == 100

    qrels_df = read_beir_qrels(folder)
    qrels: dict[str, dict[str, int]] = {}
    for q, d, r in qrels_df.iter_rows():
        qrels.setdefault(q, {})[d] = r
    runs: dict[str, dict[str, float]] = {}
    for q, d, _, s in run.iter_rows():
        runs.setdefault(q, {})[d] = s
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(runs)
    # queries with qrels but no hits count as 0 (trec_eval -c semantics)
    ndcg = sum(per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)
    print(f"\nSciFact BM25 nDCG@10={ndcg:.4f} build={build_s:.1f}s search={search_s:.1f}s")
    assert 0.655 <= ndcg <= 0.685

    cands = first_stage_candidates(run.filter(pl.col("rank") <= 5), folder, "beir", topics)
    assert cands.height == 5 * 300 and cands["doc"].str.len_chars().min() > 0


# --------------------------------------------------------------------------- the Snakemake rules


@pytest.mark.slow  # about 20 s: two Snakemake jobs, each starting a JVM
def test_snakemake_rules_run_end_to_end(java_ok: Path, tmp_path: Path) -> None:
    """rules/retrieval.smk on a tiny BEIR folder: build_index -> retrieve, then a no-op rerun."""
    _tiny_beir(tmp_path / "data")
    cfg = {
        "datasets": {
            "tiny": {
                "task": "rerank",
                "candidates": {
                    "format": "bm25",
                    "corpus": {"format": "beir", "path": "data"},
                    "topics": {"format": "beir", "path": "data"},
                    "k": 3,
                    "k1": 0.9,
                    "b": 0.4,
                    "index": "shared",
                },
            },
            # same corpus and index name: the index is built once for both datasets
            "tiny2": {
                "task": "rerank",
                "candidates": {
                    "format": "bm25",
                    "corpus": {"format": "beir", "path": "data"},
                    "topics": {"format": "jsonl", "path": "data/queries.jsonl"},
                    "k": 1,
                    "k1": 1.2,
                    "b": 0.75,
                    "index": "shared",
                },
            },
            # a dataset whose candidates come from a file, not from BM25
            "other": {
                "task": "rerank",
                "candidates": {"format": "rank_llm_json", "path": "x.json"},
                "qrels": {"format": "beir", "path": "data"},
            },
        }
    }
    for name in ("tiny", "tiny2"):
        cfg["datasets"][name]["qrels"] = {"format": "beir", "path": "data"}
    cfg["variants"] = {"bm25": {"scorer": "identity"}}
    cfg["synthetic"] = {}
    # The real workflow (a scratch copy), so the rules see the same helpers and config checks.
    from workflow_utils import scratch_workflow

    (tmp_path / "wf").mkdir()
    work = scratch_workflow(tmp_path / "wf")
    (work / "data").symlink_to(tmp_path / "data")
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    tmp_path = work
    env = dict(os.environ)
    # --configfile takes several values: it goes first, so targets after the options stay targets.
    cmd = [sys.executable, "-m", "snakemake", "--configfile", str(work / "config.yaml"), "--cores", "2", "--directory", str(work), "-s", str(work / "Snakefile")]
    target = "results/tiny/first_stage.parquet"
    proc = subprocess.run([*cmd, target, "results/tiny2/first_stage.parquet"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("rule build_index:") == 1 and proc.stderr.count("rule retrieve:") == 2
    assert sorted(p.name for p in (tmp_path / "resources/indexes").iterdir()) == ["shared"]
    tiny2 = yaml.safe_load((tmp_path / "results/tiny2/dataset_meta.yaml").read_text())
    assert tiny2["params"]["k1"] == 1.2 and tiny2["topics"]["queries"] == 3  # jsonl topics: no split filter
    from presdep.candidates.bm25 import read_first_stage

    fs = read_first_stage(tmp_path / target)
    assert set(fs["query_id"]) == {"q1", "q2"} and fs["rank"].max() <= 3
    assert (tmp_path / "results/tiny/first_stage.trec").is_file()
    assert yaml.safe_load((tmp_path / "results/tiny/dataset_meta.yaml").read_text())["params"]["k"] == 3
    assert "Indexing Complete" in (tmp_path / "logs/build_index/shared.log").read_text()
    assert (tmp_path / "results/benchmarks/retrieve/tiny.tsv").is_file()
    # a dataset without bm25 candidates does not resolve to these rules
    dry = subprocess.run([*cmd, "-n", "results/other/first_stage.parquet"], capture_output=True, text=True, env=env, timeout=120)
    assert dry.returncode != 0
    again = subprocess.run([*cmd, "-n", target], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
