"""HotpotQA loaders (IRCoT JSONL and the original JSON) on the real file, and their errors."""

import json

import polars as pl
import pytest
from records_tiny import fixture_dataset

from presdep.contracts.errors import InputFormatError
from presdep.contracts.schemas import read_table, write_table
from presdep.data.hotpotqa import read_hotpotqa, read_hotpotqa_ircot, read_hotpotqa_json

IRCOT = "hotpotqa-dev200/hotpotqa_dev200.jsonl"


@pytest.fixture(scope="module")
def real(shared_data):
    return read_hotpotqa_ircot(shared_data / IRCOT)


def test_real_file_counts_and_contracts(real, tmp_path):
    cands, qrels, gold = real
    assert cands["query_id"].n_unique() == 200 and cands.height == 2000
    assert cands.group_by("query_id").len()["len"].to_list() == [10] * 200
    per_q = qrels.group_by("query_id").agg(pl.col("relevance").sum().alias("s"), pl.len().alias("n"))
    assert (per_q["s"] == 2).all(), "every question has exactly 2 supporting paragraphs"
    assert (per_q["n"] == 10).all() and set(qrels["relevance"].unique()) == {0, 1}
    assert gold.height == 200 and gold["query_id"].n_unique() == 200
    # The three contracts accept the tables as they are.
    for df, kind in ((cands, "candidates"), (qrels, "qrels"), (gold, "answers_gold")):
        write_table(df, tmp_path / f"{kind}.parquet", kind)
        assert read_table(tmp_path / f"{kind}.parquet", kind).height == df.height


def test_real_file_first_question(real):
    cands, qrels, gold = real
    q = "5a8c7595554299585d9e36b6"
    c = cands.filter(pl.col("query_id") == q)
    assert c["doc_id"].to_list() == [str(i) for i in range(10)]
    assert c["first_stage_rank"].to_list() == list(range(1, 11))
    assert c["query"][0].startswith("What government position was held by the woman who portrayed Corliss Archer")
    assert c["doc"][0].startswith("Meet Corliss Archer: Meet Corliss Archer, a program from radio's Golden Age")
    sup = qrels.filter((pl.col("query_id") == q) & (pl.col("relevance") == 1))["doc_id"].sort().to_list()
    assert sup == ["1", "6"]
    assert c.filter(pl.col("doc_id") == "1")["doc"][0].startswith("Shirley Temple: Shirley Temple Black")
    assert gold.filter(pl.col("query_id") == q)["answer"].to_list() == ["Chief of Protocol"]


def _to_original(row: dict) -> dict:
    """An IRCoT line in the original HotpotQA layout (sentences split after '.  ')."""
    context, facts = [], []
    for ctx in row["contexts"]:
        parts = ctx["paragraph_text"].split(".  ")
        sents = [p + ".  " for p in parts[:-1]] + [parts[-1]]
        context.append([ctx["title"], sents])
        if ctx["is_supporting"]:
            facts.append([ctx["title"], 0])
    return {"_id": row["question_id"], "question": row["question_text"],
            "answer": row["answers_objects"][0]["spans"][0], "supporting_facts": facts, "context": context,
            "type": "bridge", "level": "hard"}


def test_original_json_matches_ircot(shared_data, tmp_path):
    lines = (shared_data / IRCOT).read_text(encoding="utf-8").splitlines()[:5]
    (tmp_path / "ircot.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "orig.json").write_text(json.dumps([_to_original(json.loads(x)) for x in lines]), encoding="utf-8")
    a = read_hotpotqa(tmp_path / "ircot.jsonl", "ircot_jsonl")
    b = read_hotpotqa(tmp_path / "orig.json", "hotpotqa_json")
    for x, y in zip(a, b):
        assert x.equals(y)


def test_answer_number_and_date_fallbacks(tmp_path):
    row = {"question_id": "q", "question_text": "When?", "contexts": [
        {"id": "0", "title": "T", "paragraph_text": "x", "is_supporting": True}],
        "answers_objects": [{"number": "", "date": {"day": "4", "month": "July", "year": "1776"}, "spans": []},
                            {"number": "12", "date": {"day": "", "month": "", "year": ""}, "spans": []},
                            {"number": "", "date": {}, "spans": ["twelve", "twelve"]}]}
    (tmp_path / "a.jsonl").write_text(json.dumps(row) + "\n")
    _, _, gold = read_hotpotqa_ircot(tmp_path / "a.jsonl")
    assert gold["answer"].to_list() == ["4 July 1776", "12", "twelve"]


def _line(**over):
    row = {"question_id": "q1", "question_text": "Who?", "answers_objects": [{"spans": ["A"]}],
           "contexts": [{"id": "0", "title": "T", "paragraph_text": "p", "is_supporting": True},
                        {"id": "1", "title": "U", "paragraph_text": "r", "is_supporting": False}]}
    row.update(over)
    return json.dumps(row)


@pytest.mark.parametrize(
    "content, match",
    [
        (_line() + "\n{not json\n", r"line 2: invalid JSON"),
        (json.dumps({"question_id": "q", "question_text": "x", "answers_objects": []}) + "\n",
         r"line 1: question lacks field\(s\) \['contexts'\]"),
        (_line(contexts=[{"id": "0", "title": "T", "paragraph_text": "p", "is_supporting": "yes"}]) + "\n",
         r"line 1 contexts\[0\]: 'is_supporting' must be true or false"),
        (_line(contexts=[{"id": "0", "title": "T", "paragraph_text": "p"}]) + "\n",
         r"line 1 contexts\[0\]: paragraph lacks field\(s\) \['is_supporting'\]"),
        (_line() + "\n" + _line() + "\n", r"line 2: question id 'q1' appears twice"),
        (_line(answers_objects=[{"spans": []}]) + "\n", r"line 1: question 'q1' has no gold answer"),
        (_line(contexts=[{"id": "0", "title": "T", "paragraph_text": "p", "is_supporting": True}] * 2) + "\n",
         r"line 1: question 'q1' has paragraph id '0' twice"),
        (_line(contexts=[]) + "\n", r"line 1: question 'q1' has no paragraphs"),
        ("\n\n", r"whole file: no questions found"),
    ],
)
def test_ircot_errors_name_file_and_line(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputFormatError, match=match) as err:
        read_hotpotqa_ircot(path)
    assert str(path) in str(err.value)


def test_ircot_bad_byte_names_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(_line().encode() + b"\n" + b'{"question_id": "\xff"}\n')
    with pytest.raises(InputFormatError, match=r"line 2: not valid UTF-8"):
        read_hotpotqa_ircot(path)


@pytest.mark.parametrize(
    "entry, match",
    [
        ({"_id": "a", "question": "q", "answer": "x", "context": []}, r"entry 0: question lacks field\(s\) \['supporting_facts'\]"),
        ({"_id": "a", "question": "q", "answer": "x", "supporting_facts": [["Nope", 0]], "context": [["T", ["s."]]]},
         r"entry 0 \(_id a\) supporting_facts\[0\]: title 'Nope' is not a paragraph title"),
        ({"_id": "a", "question": "q", "answer": "x", "supporting_facts": [], "context": [["T", "not a list"]]},
         r"entry 0 \(_id a\) context\[0\]: expected \[title, \[sentence, ...\]\]"),
        ({"_id": "a", "question": "q", "answer": 3, "supporting_facts": [], "context": [["T", ["s."]]]},
         r"entry 0 \(_id a\): 'answer' must be a string"),
    ],
)
def test_original_json_errors(tmp_path, entry, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([entry]), encoding="utf-8")
    with pytest.raises(InputFormatError, match=match):
        read_hotpotqa_json(path)


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown HotpotQA format 'squad'"):
        read_hotpotqa("x", "squad")


def test_fixture_takes_the_first_questions_and_writes_gold(shared_data, tmp_path):
    """The workflow's fixture step on this format (active once build_fixture writes gold answers)."""
    from presdep.candidates import fixtures

    cfg = {"task": "qa", "candidates": {"format": "ircot_jsonl", "path": str(shared_data / IRCOT)}, "max_queries": 50}
    out = {k: tmp_path / f"{k}.parquet" for k in ("c", "q", "g")}
    fixtures.build_fixture(fixture_dataset("hotpotqa-dev", cfg, seed=4401), out["c"], out["q"], out_gold=out["g"])
    every = {json.loads(x)["question_id"] for x in (shared_data / IRCOT).read_text(encoding="utf-8").splitlines()}
    cands = read_table(out["c"], "candidates")
    kept = set(cands["query_id"].unique())
    assert len(kept) == 50 and kept <= every, "a sample of 50 questions of the file"
    qrels = read_table(out["q"], "qrels")
    assert cands.height == qrels.height == 500 and qrels["relevance"].sum() == 100
    gold = read_table(out["g"], "answers_gold")
    assert set(gold["query_id"]) == kept
