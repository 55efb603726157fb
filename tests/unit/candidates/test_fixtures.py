import polars as pl
import pytest
from records_tiny import fixture_dataset

from presdep.candidates.fixtures import build_fixture
from presdep.contracts.errors import InputFormatError
from presdep.contracts.schemas import read_metadata, read_table


def test_dl19_fixture(shared_data, tmp_path):
    cfg = {
        "task": "rerank",
        "candidates": {"format": "rank_llm_json", "path": str(shared_data / "trec-dl19/bm25_retrieve_results_dl19_top100.json")},
        "qrels": {"format": "trec", "path": str(shared_data / "trec-dl19/qrels.dl19-passage.txt")},
    }
    build_fixture(fixture_dataset("dl19", cfg, seed=4401), tmp_path / "c.parquet", tmp_path / "q.parquet", {"x": 1})
    cands = read_table(tmp_path / "c.parquet", "candidates")
    qrels = read_table(tmp_path / "q.parquet", "qrels")
    assert cands.height == 4300 and qrels.height == 9260
    first = cands.filter(pl.col("query_id") == "264014").head(1)
    assert first["first_stage_rank"][0] == 1 and first["doc_id"][0] == "5611210"
    assert read_metadata(tmp_path / "c.parquet")["dataset"] == "dl19"


def test_qrels_for_unknown_queries_are_skipped_and_logged(tmp_path, caplog):
    cands = tmp_path / "c.json"
    cands.write_text('[{"query": "q", "hits": [{"content": "x", "qid": "1", "docid": "a", "rank": 1, "score": 1.0}]}]')
    qrels = tmp_path / "q.txt"
    qrels.write_text("1 0 a 1\n99 0 z 1\n")
    cfg = {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": str(cands)}, "qrels": {"format": "trec", "path": str(qrels)}}
    build_fixture(fixture_dataset("tiny", cfg, seed=4401), tmp_path / "c.parquet", tmp_path / "q.parquet")
    assert f"1 judgement(s) for 1 query id(s) that have no candidates in {cands} are ignored" in caplog.text
    assert read_table(tmp_path / "q.parquet", "qrels")["query_id"].to_list() == ["1"]


def test_max_queries_sets_judgements_aside_without_blaming_the_files(tmp_path, caplog):
    """Judgements of queries the sample left out are the config's choice: said as such, no warning."""
    import logging

    hits = lambda q: [{"content": "x", "qid": q, "docid": "a", "rank": 1, "score": 1.0}]  # noqa: E731
    cands = tmp_path / "c.json"
    cands.write_text(__import__("json").dumps([{"query": f"q{q}", "hits": hits(str(q))} for q in range(6)]))
    qrels = tmp_path / "q.txt"
    qrels.write_text("".join(f"{q} 0 a 1\n" for q in range(6)) + "99 0 z 1\n")
    cfg = {"task": "rerank", "max_queries": 2, "candidates": {"format": "rank_llm_json", "path": str(cands)},
           "qrels": {"format": "trec", "path": str(qrels)}}
    with caplog.at_level(logging.INFO):
        build_fixture(fixture_dataset("tiny", cfg, seed=4401), tmp_path / "c.parquet", tmp_path / "q.parquet")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"{qrels}: 1 judgement(s) for 1 query id(s) that have no candidates in {cands} are ignored (e.g. 99)"]
    assert any("4 judgement(s) of the 4 quer(ies) outside this run's sample" in r.getMessage() for r in caplog.records)
    meta = read_metadata(tmp_path / "q.parquet")
    assert meta["ignored_qrels"] == 5 and meta["unsampled_qrels"] == 4
    assert read_table(tmp_path / "q.parquet", "qrels").height == 2


def test_no_matching_qrels_is_an_error_and_writes_nothing(tmp_path):
    cands = tmp_path / "c.json"
    cands.write_text('[{"query": "q", "hits": [{"content": "x", "qid": "1", "docid": "a", "rank": 1, "score": 1.0}]}]')
    qrels = tmp_path / "q.txt"
    qrels.write_text("7 0 a 1\n")
    cfg = {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": str(cands)}, "qrels": {"format": "trec", "path": str(qrels)}}
    with pytest.raises(InputFormatError, match="no judgement matches a query"):
        build_fixture(fixture_dataset("tiny", cfg, seed=4401), tmp_path / "c.parquet", tmp_path / "q.parquet")
    assert not (tmp_path / "c.parquet").exists() and not (tmp_path / "q.parquet").exists()


def _subset_by_hand(ids, n, seed, dataset):
    """The documented rule, written out: sort, Fisher-Yates with PCG64(stable seed), first n, sorted."""
    import numpy as np

    from presdep.contracts.presentations import stable_seed

    out = sorted(set(ids))
    rng = np.random.Generator(np.random.PCG64(stable_seed(seed, "query_subset", dataset)))
    for i in range(len(out) - 1, 0, -1):
        j = int(rng.integers(0, i + 1))
        out[i], out[j] = out[j], out[i]
    return sorted(out[:n])


def test_query_subset_is_one_seeded_rule_whatever_the_file_order():
    from presdep.candidates.fixtures import query_subset

    ids = [f"q{i}" for i in range(30)]
    chosen = query_subset(ids, 7, seed=4401, dataset="dl19")
    assert chosen == _subset_by_hand(ids, 7, 4401, "dl19")
    assert query_subset(list(reversed(ids)) + ids[:5], 7, seed=4401, dataset="dl19") == chosen, "file order and repeats do not matter"
    assert query_subset(ids, 7, seed=4402, dataset="dl19") != chosen
    assert set(query_subset(ids, 6, seed=4401, dataset="dl19")) < set(chosen), "growing N only adds queries"
    assert query_subset(ids, None, seed=1, dataset="x") == sorted(ids) == query_subset(ids, 99, seed=1, dataset="x")


def test_max_queries_takes_the_same_sample_for_every_format(tmp_path):
    """rank_llm JSON (file order q9..q0) and the same queries as IRCoT-free self-judged JSONL agree."""
    hits = [{"query": f"text {i}", "hits": [{"content": "x", "qid": f"q{i}", "docid": f"d{i}", "rank": 1, "score": 1.0}]}
            for i in reversed(range(10))]
    import json

    cands = tmp_path / "c.json"
    cands.write_text(json.dumps(hits))
    qrels = tmp_path / "q.txt"
    qrels.write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(10)))
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "p", "responses": ["a", "b"], "ranks": [1, 2]}) + "\n"
                                 for i in range(10)))
    a = {"task": "rerank", "max_queries": 4, "candidates": {"format": "rank_llm_json", "path": str(cands)},
         "qrels": {"format": "trec", "path": str(qrels)}}
    b = {"task": "response", "max_queries": 4, "candidates": {"format": "responses_jsonl", "path": str(responses)}}
    build_fixture(fixture_dataset("same", a, seed=7), tmp_path / "a.parquet", tmp_path / "aq.parquet")
    build_fixture(fixture_dataset("same", b, seed=7), tmp_path / "b.parquet", tmp_path / "bq.parquet")
    got_a = sorted(read_table(tmp_path / "a.parquet", "candidates")["query_id"].unique())
    got_b = sorted(read_table(tmp_path / "b.parquet", "candidates")["query_id"].unique())
    assert got_a == got_b == _subset_by_hand([f"q{i}" for i in range(10)], 4, 7, "same")
    assert read_metadata(tmp_path / "a.parquet")["query_subset"]["rule"] == "seeded_sample"


def _first_hits(rank_llm_json, k):
    """Oracle by hand: each query's k lowest-rank hits of the rank_llm JSON file."""
    import json

    out = {}
    for entry in json.loads(rank_llm_json.read_text(encoding="utf-8")):
        hits = sorted(entry["hits"], key=lambda h: h["rank"])[:k]
        out[str(hits[0]["qid"])] = [str(h["docid"]) for h in hits]
    return out


def test_k_input_cuts_every_format_to_its_best_ranks(shared_data, tmp_path):
    """rank_llm JSON, a TREC run with a corpus and topics, and a self-judged QA file: same rule."""
    import json

    dl19 = shared_data / "trec-dl19"
    qrels = {"format": "trec", "path": str(dl19 / "qrels.dl19-passage.txt")}
    want = _first_hits(dl19 / "bm25_retrieve_results_dl19_top100.json", 20)
    a = {"task": "rerank", "k_input": 20, "qrels": qrels,
         "candidates": {"format": "rank_llm_json", "path": str(dl19 / "bm25_retrieve_results_dl19_top100.json")}}
    build_fixture(fixture_dataset("dl19", a, seed=1), tmp_path / "a.parquet", tmp_path / "aq.parquet")
    got = read_table(tmp_path / "a.parquet", "candidates")
    assert got.height == 43 * 20
    by_q = {q: g.sort("first_stage_rank")["doc_id"].to_list() for (q,), g in got.group_by("query_id")}
    assert by_q == want
    meta = read_metadata(tmp_path / "a.parquet")["depth"]
    assert meta == {"k_input": 20, "before": {"min": 100, "max": 100}, "after": {"min": 20, "max": 20},
                    "queries_short": 0}
    # The same first stage as a TREC run, its texts from a JSONL corpus of the file's own passages.
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as fh:
        seen = set()
        for entry in json.loads((dl19 / "bm25_retrieve_results_dl19_top100.json").read_text(encoding="utf-8")):
            for h in entry["hits"]:
                if h["docid"] not in seen:
                    seen.add(h["docid"])
                    fh.write(json.dumps({"id": str(h["docid"]), "contents": h["content"]}) + "\n")
    b = {"task": "rerank", "k_input": 20, "qrels": qrels,
         "candidates": {"format": "trec_run", "run": str(dl19 / "bm25_trec_run_dl19_top100.txt"),
                        "corpus": {"format": "jsonl", "path": str(corpus)},
                        "topics": {"format": "trec", "path": str(dl19 / "topics.dl19-passage.txt"), "split": "test"}}}
    build_fixture(fixture_dataset("dl19run", b, seed=1), tmp_path / "b.parquet", tmp_path / "bq.parquet")
    run = read_table(tmp_path / "b.parquet", "candidates")
    assert {q: g.sort("first_stage_rank")["doc_id"].to_list() for (q,), g in run.group_by("query_id")} == want
    assert read_metadata(tmp_path / "b.parquet")["depth"]["k_input"] == 20


def test_k_input_on_a_self_judged_file_and_short_queries_are_said(shared_data, tmp_path, caplog):
    path = shared_data / "hotpotqa-dev200" / "hotpotqa_dev200.jsonl"
    cfg = {"task": "qa", "k_input": 4, "max_queries": 5, "candidates": {"format": "ircot_jsonl", "path": str(path)}}
    build_fixture(fixture_dataset("hp", cfg, seed=1), tmp_path / "c.parquet", tmp_path / "q.parquet")
    c = read_table(tmp_path / "c.parquet", "candidates")
    assert c.group_by("query_id").agg(pl.col("first_stage_rank").max())["first_stage_rank"].to_list() == [4] * 5
    cfg["k_input"] = 1000
    build_fixture(fixture_dataset("hp", cfg, seed=1), tmp_path / "c2.parquet", tmp_path / "q2.parquet")
    depth = read_metadata(tmp_path / "c2.parquet")["depth"]
    # The cut comes before the query sample: all 200 questions of the file are short of 1000 paragraphs.
    assert depth["queries_short"] == 200 and "200 of 200 queries have fewer than k_input = 1000" in caplog.text


def test_repeated_passage_texts_are_warned_and_counted_in_the_metadata(tmp_path, caplog):
    hits = [{"content": text, "qid": "1", "docid": d, "rank": r + 1, "score": 1.0}
            for r, (d, text) in enumerate([("a", "same"), ("b", "same"), ("c", "other")])]
    cands = tmp_path / "c.json"
    cands.write_text(__import__("json").dumps([{"query": "q", "hits": hits}]))
    qrels = tmp_path / "q.txt"
    qrels.write_text("1 0 a 1\n")
    cfg = {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": str(cands)},
           "qrels": {"format": "trec", "path": str(qrels)}}
    build_fixture(fixture_dataset("tiny", cfg, seed=4401), tmp_path / "c.parquet", tmp_path / "q.parquet")
    assert f"{cands}: 1 set(s) repeat a candidate text (1 duplicate(s) in all)" in caplog.text
    assert read_metadata(tmp_path / "c.parquet")["duplicate_texts"] == {"sets": 1, "duplicates": 1}
