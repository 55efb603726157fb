"""Response sets are shown in a label-blind first-stage order, whatever order the file lists them in;
repeated texts inside one set are counted and named once per file."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import polars as pl
import pytest

from presdep.data.duplicates import duplicates_in
from presdep.data.hotpotqa import read_hotpotqa_ircot
from presdep.data.responses import read_response_jsonl, read_rm_bench


def _hash_order(qid: str, ids: list[str]) -> list[str]:
    """The documented rule, restated: ascending sha256 of "<prompt id>\\0<response id>"."""
    return sorted(ids, key=lambda d: hashlib.sha256(f"{qid}\0{d}".encode()).hexdigest())


def _best_first(path: Path, prompts: int, *, reverse: bool = False, with_ids: bool = True) -> Path:
    """A ranked JSONL written best-first (or worst-first): response k has rank k + 1."""
    lines = []
    for p in range(prompts):
        rows = [(f"r{p}-{k}", f"answer {k} to prompt {p}", k + 1) for k in range(4)]
        if reverse:
            rows.reverse()
        line = {"id": f"p{p}", "prompt": f"prompt {p}", "responses": [t for _, t, _ in rows],
                "ranks": [r for _, _, r in rows]}
        if with_ids:
            line["response_ids"] = [d for d, _, _ in rows]
        lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _identity_ndcg1(cands: pl.DataFrame, qrels: pl.DataFrame) -> float:
    """nDCG@1 of the given (first-stage) order: the top response's gain over the best gain."""
    top = cands.filter(pl.col("first_stage_rank") == 1).join(qrels, on=["query_id", "doc_id"])
    best = qrels.group_by("query_id").agg(pl.col("relevance").max().alias("best"))
    joined = top.join(best, on="query_id")
    gains = joined.select((2 ** pl.col("relevance") - 1) / (2 ** pl.col("best") - 1))
    return float(gains.to_series().mean())


def test_a_best_first_jsonl_no_longer_hands_the_identity_order_the_labels(tmp_path: Path) -> None:
    cands, qrels, _ = read_response_jsonl(_best_first(tmp_path / "best_first.jsonl", 40))
    # The first stage is the hash order, not the file's order ...
    for (qid,), group in cands.sort("first_stage_rank").group_by(["query_id"], maintain_order=True):
        assert group["doc_id"].to_list() == _hash_order(qid, [f"r{qid[1:]}-{k}" for k in range(4)])
    # ... so following it is no longer nDCG@1 = 1 by construction (4 responses: about 1 in 4 tops are the best).
    assert _identity_ndcg1(cands, qrels) < 0.75
    top_is_best = cands.filter(pl.col("first_stage_rank") == 1).join(qrels, on=["query_id", "doc_id"])
    assert 0.05 < (top_is_best["relevance"] == 3).mean() < 0.6


def test_the_order_does_not_depend_on_the_files_order_of_responses(tmp_path: Path) -> None:
    a = read_response_jsonl(_best_first(tmp_path / "best.jsonl", 12))
    b = read_response_jsonl(_best_first(tmp_path / "worst.jsonl", 12, reverse=True))
    cols = ["query_id", "doc_id", "doc", "first_stage_rank"]
    assert a.candidates.select(cols).sort(cols[:2]).equals(b.candidates.select(cols).sort(cols[:2]))
    assert a.qrels.sort(["query_id", "doc_id"]).equals(b.qrels.sort(["query_id", "doc_id"]))


def test_positional_ids_keep_today_and_are_ordered_by_the_same_rule(tmp_path: Path) -> None:
    cands, _, _ = read_response_jsonl(_best_first(tmp_path / "r.jsonl", 3, with_ids=False))
    for qid in ("p0", "p1", "p2"):
        got = cands.filter(pl.col("query_id") == qid).sort("first_stage_rank")["doc_id"].to_list()
        assert sorted(got) == ["0", "1", "2", "3"] and got == _hash_order(qid, ["0", "1", "2", "3"])


def test_rm_bench_keeps_its_ids_and_order_under_the_shared_rule(tmp_path: Path) -> None:
    """RM-Bench's ids are the first 12 hex digits of sha256("<id>\\0<label>\\0<index>"), ascending."""
    rows = [{"id": 7, "prompt": "Say hi.", "chosen": ["hi", "Hi!", "**Hi**"], "rejected": ["no", "No!", "**No**"]}]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    cands = read_rm_bench(path).candidates.sort("first_stage_rank")
    labelled = (("chosen", rows[0]["chosen"]), ("rejected", rows[0]["rejected"]))
    want = {hashlib.sha256(f"7\0{lab}\0{k}".encode()).hexdigest()[:12]: t for lab, texts in labelled for k, t in enumerate(texts)}
    assert cands["doc_id"].to_list() == sorted(want)
    assert dict(zip(cands["doc_id"], cands["doc"])) == want


def test_repeated_response_texts_are_counted_and_named_once_per_file(tmp_path: Path, caplog) -> None:
    lines = [{"id": "a", "prompt": "p", "responses": ["same", "same", "other"], "ranks": [1, 2, 3]},
             {"id": "b", "prompt": "q", "responses": ["x", "y"], "ranks": [1, 2]},
             {"id": "c", "prompt": "r", "responses": ["z", "z", "z"], "ranks": [1, 1, 2]}]
    path = tmp_path / "dups.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        cands, _, _ = read_response_jsonl(path)
    assert cands.height == 8  # kept as given
    warned = [r.getMessage() for r in caplog.records if "repeat a response text" in r.getMessage()]
    assert warned == [f"{path}: 2 set(s) repeat a response text (3 duplicate(s) in all); identical texts get identical "
                      "scores, so their judged difference cannot be recovered (first: 'a')"]


def test_repeats_are_counted_in_a_candidates_table_as_its_metadata_would(tmp_path: Path) -> None:
    lines = [{"id": "b", "prompt": "p", "responses": ["x", "x", "x", "y"], "ranks": [1, 2, 3, 4]},
             {"id": "a", "prompt": "q", "responses": ["u", "u"], "ranks": [1, 2]},
             {"id": "c", "prompt": "r", "responses": ["v", "w"], "ranks": [1, 2]}]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    counts = duplicates_in(read_response_jsonl(path).candidates)
    assert (counts.as_dict(), counts.first) == ({"sets": 2, "duplicates": 3}, "a")
    assert duplicates_in(read_response_jsonl(path).candidates.filter(pl.col("query_id") == "c")).as_dict() == {
        "sets": 0, "duplicates": 0}


def test_repeated_rm_bench_texts_are_counted(tmp_path: Path, caplog) -> None:
    rows = [{"id": 1, "prompt": "p", "chosen": ["a", "a", "b"], "rejected": ["c", "d", "e"]},
            {"id": 2, "prompt": "q", "chosen": ["a", "b", "c"], "rejected": ["d", "e", "f"]}]
    path = tmp_path / "rm.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        read_rm_bench(path)
    assert [r.getMessage() for r in caplog.records if "repeat a response text" in r.getMessage()] == [
        f"{path}: 1 set(s) repeat a response text (1 duplicate(s) in all); identical texts get identical "
        "scores, so their judged difference cannot be recovered (first: '1')"]


def test_repeated_paragraphs_are_counted(tmp_path: Path, caplog) -> None:
    ctx = [{"id": j, "title": "T", "paragraph_text": "same text" if j < 2 else f"text {j}", "is_supporting": j == 0}
           for j in range(4)]
    row = {"question_id": "q1", "question_text": "Q?", "contexts": ctx,
           "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": ["A"]}]}
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        read_hotpotqa_ircot(path)
    assert [r.getMessage() for r in caplog.records if "repeat a paragraph text" in r.getMessage()] == [
        f"{path}: 1 set(s) repeat a paragraph text (1 duplicate(s) in all); identical texts get identical "
        "scores, so their judged difference cannot be recovered (first: 'q1')"]


@pytest.mark.parametrize("name, sets", [("chat_filtered.json", 12), ("safety-response_filtered.json", 24)])
def test_real_rm_bench_repeats_are_named(shared_data, caplog, name: str, sets: int) -> None:
    """Measured on the real files: 12 chat and 24 safety-response prompts list one text twice."""
    with caplog.at_level(logging.WARNING):
        read_rm_bench(shared_data / "rm-bench" / name)
    warned = [r.getMessage() for r in caplog.records if "repeat a response text" in r.getMessage()]
    assert len(warned) == 1 and f": {sets} set(s) repeat a response text ({sets} duplicate(s) in all)" in warned[0]
