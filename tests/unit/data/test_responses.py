"""Response-ranking loaders: RM-Bench JSON on the real files, the generic ranks JSONL, errors."""

import json

import polars as pl
import pytest
from records_tiny import fixture_dataset

from presdep.contracts.errors import InputFormatError
from presdep.contracts.schemas import write_table
from presdep.data.responses import (
    label_blind_id,
    read_response_jsonl,
    read_responses,
    read_rm_bench,
    relevance_from_ranks,
)


@pytest.mark.parametrize("name, prompts", [("chat_filtered.json", 129), ("safety-response_filtered.json", 157)])
def test_rm_bench_real_files(shared_data, tmp_path, name, prompts):
    path = shared_data / "rm-bench" / name
    cands, qrels, gold = read_rm_bench(path)
    assert gold is None
    assert cands["query_id"].n_unique() == prompts and cands.height == 6 * prompts
    write_table(cands, tmp_path / "c.parquet", "candidates")
    write_table(qrels, tmp_path / "q.parquet", "qrels")
    raw = {str(r["id"]): r for r in json.loads(path.read_text(encoding="utf-8"))}
    joined = cands.join(qrels, on=["query_id", "doc_id"], how="left")
    assert joined["relevance"].null_count() == 0, "every response is judged"
    for (qid,), g in joined.group_by("query_id"):
        r = raw[qid]
        assert g["query"][0] == r["prompt"].strip()
        assert sorted(g["first_stage_rank"].to_list()) == [1, 2, 3, 4, 5, 6]
        chosen = g.filter(pl.col("relevance") == 1)["doc"].to_list()
        rejected = g.filter(pl.col("relevance") == 0)["doc"].to_list()
        assert sorted(chosen) == sorted(r["chosen"]) and sorted(rejected) == sorted(r["rejected"])
        # Every chosen response (by the file) is graded above every rejected one.
        grade = {}
        for d, rel in g.select("doc", "relevance").iter_rows():
            grade.setdefault(d, set()).add(rel)
        assert all(min(grade[c]) > max(grade[x]) for c in r["chosen"] for x in r["rejected"])
    # The first-stage order does not reveal the label: chosen responses are not
    # simply the first three (the file's order), and first place goes either way.
    top3_all_chosen = joined.filter(pl.col("first_stage_rank") <= 3).group_by("query_id").agg(
        pl.col("relevance").min().alias("m"))["m"].sum()
    assert top3_all_chosen < prompts // 4
    first_chosen = joined.filter(pl.col("first_stage_rank") == 1)["relevance"].mean()
    assert 0.3 < first_chosen < 0.7


def test_rm_bench_ids_are_label_blind_and_stable():
    a = label_blind_id("8", "chosen", 0)
    assert a == label_blind_id("8", "chosen", 0) and len(a) == 12 and int(a, 16) >= 0
    assert len({label_blind_id("8", lab, k) for lab in ("chosen", "rejected") for k in range(3)}) == 6


@pytest.mark.parametrize(
    "ranks, expected",
    [([1, 1, 1, 2, 2, 2], [1, 1, 1, 0, 0, 0]), ([2, 1, 3, 1], [1, 2, 0, 2]), ([1, 5, 3], [2, 0, 1]),
     ([1, 2, 3, 4, 5, 5], [4, 3, 2, 1, 0, 0])],
)
def test_relevance_from_ranks(ranks, expected):
    assert relevance_from_ranks(ranks) == expected


def test_generic_jsonl(tmp_path):
    rows = [
        {"id": "p1", "prompt": " What is 2+2? ", "responses": ["4.", "5.", "2+2 is 4."], "ranks": [2, 3, 1]},
        {"prompt": "Hi", "responses": ["Hello!", "Go away."], "ranks": [1, 2], "response_ids": ["a", "b"]},
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cands, qrels, _ = read_responses(path, "responses_jsonl")
    assert cands["query_id"].to_list() == ["p1"] * 3 + ["2"] * 2  # id defaults to the line number
    assert cands["doc_id"].to_list() == ["0", "1", "2", "a", "b"]
    # The label-blind order (ascending sha256 of "<prompt id>\0<response id>"), which for
    # these ids happens to be the file's: test_responses_order.py shows it is not the file's in general.
    assert cands["first_stage_rank"].to_list() == [1, 2, 3, 1, 2]
    assert cands["query"][0] == "What is 2+2?"
    assert qrels["relevance"].to_list() == [1, 0, 2, 1, 0]


def test_rm_bench_and_generic_agree(shared_data, tmp_path):
    """RM-Bench rewritten as ranks (chosen 1, rejected 2) gives the same judgements per text."""
    entries = json.loads((shared_data / "rm-bench" / "chat_filtered.json").read_text(encoding="utf-8"))[:10]
    with open(tmp_path / "g.jsonl", "w", encoding="utf-8") as fh:
        for e in entries:
            fh.write(json.dumps({"id": e["id"], "prompt": e["prompt"], "responses": e["chosen"] + e["rejected"],
                                 "ranks": [1, 1, 1, 2, 2, 2]}) + "\n")
    (tmp_path / "rm.json").write_text(json.dumps(entries), encoding="utf-8")
    a = read_rm_bench(tmp_path / "rm.json")
    b = read_response_jsonl(tmp_path / "g.jsonl")

    def by_text(s):
        j = s.candidates.join(s.qrels, on=["query_id", "doc_id"])
        return sorted(j.select("query_id", "doc", "relevance").iter_rows())

    assert by_text(a) == by_text(b)


@pytest.mark.parametrize(
    "line, match",
    [
        ('{"prompt": "p", "responses": ["a", "b"]}', r"line 1: missing field\(s\) \['ranks'\]"),
        ('{"prompt": "p", "responses": ["a", "b"], "ranks": [1]}', r"line 1: 'ranks' must be 2 integers >= 1"),
        ('{"prompt": "p", "responses": ["a", "b"], "ranks": [1, 0]}', r"line 1: 'ranks' must be 2 integers"),
        ('{"prompt": "p", "responses": ["a", "b"], "ranks": [2, 2]}', r"line 1: all responses share one rank"),
        ('{"prompt": "p", "responses": ["a", " "], "ranks": [1, 2]}', r"line 1: prompt '1': response 1 is empty"),
        ('{"prompt": "p", "responses": "a", "ranks": [1]}', r"line 1: 'responses' must be a non-empty list of strings"),
        ('{"prompt": "p", "responses": ["a", "b"], "ranks": [1, 2], "response_ids": ["x", "x"]}',
         r"line 1: prompt '1' has response id 'x' twice"),
        ('{"prompt": "p", "responses": ["a", "b"], "ranks": [1, 2]', r"line 1: invalid JSON"),
    ],
)
def test_generic_errors(tmp_path, line, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match=match) as err:
        read_response_jsonl(path)
    assert str(path) in str(err.value)


def test_generic_duplicate_prompt_id(tmp_path):
    path = tmp_path / "dup.jsonl"
    row = json.dumps({"id": 7, "prompt": "p", "responses": ["a", "b"], "ranks": [1, 2]})
    path.write_text(row + "\n" + row + "\n")
    with pytest.raises(InputFormatError, match=r"line 2: prompt id '7' appears twice"):
        read_response_jsonl(path)


@pytest.mark.parametrize(
    "entries, match",
    [
        ([{"id": 1, "prompt": "p", "chosen": ["a"]}], r"entry 0: missing field\(s\) \['rejected'\]"),
        ([{"id": 1, "prompt": "p", "chosen": ["a"], "rejected": []}], r"entry 0 \(id 1\): 'rejected' must be a non-empty list"),
        ([{"id": 1, "prompt": "p", "chosen": ["a"], "rejected": ["b"]}] * 2, r"entry 1 \(id 1\): prompt id '1' appears twice"),
        ({"id": 1}, r"top level: expected a JSON list"),
    ],
)
def test_rm_bench_errors(tmp_path, entries, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    with pytest.raises(InputFormatError, match=match):
        read_rm_bench(path)


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown response-set format 'csv'"):
        read_responses("x", "csv")


def test_fixture_writes_empty_gold_for_responses(shared_data, tmp_path):
    """The workflow's fixture step on RM-Bench: a seeded sample of 40 prompts, no gold answers."""
    from presdep.candidates import fixtures
    from presdep.contracts.schemas import read_metadata, read_table

    cfg = {"task": "response", "candidates": {"format": "rm_bench_json", "path": str(shared_data / "rm-bench" / "chat_filtered.json")},
           "max_queries": 40}
    out = {k: tmp_path / f"{k}.parquet" for k in ("c", "q", "g")}
    fixtures.build_fixture(fixture_dataset("rm-bench-chat", cfg, seed=4401), out["c"], out["q"], out_gold=out["g"])
    every = {str(e["id"]) for e in json.loads((shared_data / "rm-bench" / "chat_filtered.json").read_text(encoding="utf-8"))}
    cands = read_table(out["c"], "candidates")
    kept = set(cands["query_id"].unique())
    assert len(kept) == 40 and kept <= every and cands.height == 240
    assert read_metadata(out["c"])["query_subset"] == {"rule": "seeded_sample", "seed": 4401, "max_queries": 40,
                                                      "queries": 40, "of": len(every)}
    assert read_table(out["q"], "qrels")["relevance"].sum() == 120
    assert read_table(out["g"], "answers_gold").height == 0
