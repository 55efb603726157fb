"""Synthetic QA and response sets: deterministic, in the real formats, labels by construction."""

import hashlib
import json
import re

import polars as pl
import pytest

from presdep.data.hotpotqa import read_hotpotqa_ircot
from presdep.data.responses import read_response_jsonl
from presdep.data.synthetic_tasks import SyntheticTaskSpec, generate, write_from_config


def _digest(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("task, n", [("qa", 10), ("response", 6)])
def test_deterministic_seed_sensitive_and_splits_independent(tmp_path, task, n):
    spec = SyntheticTaskSpec(task, seed=3, candidates=n, queries={"test": 5})
    generate(spec, tmp_path / "a")
    generate(spec, tmp_path / "b")
    generate(SyntheticTaskSpec(task, seed=4, candidates=n, queries={"test": 5}), tmp_path / "c")
    generate(SyntheticTaskSpec(task, seed=3, candidates=n, queries={"train": 7, "test": 5}), tmp_path / "d")
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    # Adding a train split leaves the test split byte-identical.
    name = "questions.jsonl" if task == "qa" else "responses.jsonl"
    assert (tmp_path / "a/test" / name).read_bytes() == (tmp_path / "d/test" / name).read_bytes()


def test_qa_two_supporting_paragraphs_chain_to_the_answer(tmp_path):
    files = generate(SyntheticTaskSpec("qa", seed=17, candidates=10, queries={"test": 8}), tmp_path)
    cands, qrels, gold = read_hotpotqa_ircot(files["test"])
    assert cands["query_id"].n_unique() == 8 and cands.height == 80
    j = cands.join(qrels, on=["query_id", "doc_id"])
    answers = dict(gold.iter_rows())
    assert gold.height == 8
    kinds = set()
    for (qid,), g in j.group_by("query_id"):
        sup = g.filter(pl.col("relevance") == 1)
        assert sup.height == 2
        answer = answers[qid]
        question = g["query"][0]
        titles = [d.split(": ", 1)[0] for d in sup["doc"]]
        bodies = [d.split(": ", 1)[1] for d in sup["doc"]]
        # The asked entity is the title of one supporting paragraph (first hop) ...
        hop1 = [i for i, t in enumerate(titles) if t in question]
        assert len(hop1) == 1
        hop2 = 1 - hop1[0]
        # ... which names the bridge entity, the title of the other (second hop) ...
        assert titles[hop2] in bodies[hop1[0]] and titles[hop2] not in question
        # ... and only the second hop states the answer: neither paragraph answers alone.
        assert re.search(rf"\b{re.escape(answer)}\b", bodies[hop2])
        assert not re.search(rf"\b{re.escape(answer)}\b", bodies[hop1[0]])
        # No distractor states the gold answer.
        others = g.filter(pl.col("relevance") == 0)["doc"].to_list()
        assert not any(re.search(rf"\b{re.escape(answer)}\b", d) for d in others)
        kinds.add(question.split()[0])
    assert len(kinds) >= 2, "several question types"
    # The supporting paragraphs are not always in the same places.
    assert j.filter(pl.col("relevance") == 1)["first_stage_rank"].n_unique() > 3


def _expected(prompt: str) -> str:
    if m := re.fullmatch(r"What is (\d+) plus (\d+)\?", prompt):
        return str(int(m[1]) + int(m[2]))
    if m := re.fullmatch(r"What is (\d+) times (\d+)\?", prompt):
        return str(int(m[1]) * int(m[2]))
    if m := re.fullmatch(r"How many metres are in (\d+) kilometres\?", prompt):
        return str(int(m[1]) * 1000)
    if m := re.fullmatch(r"How many minutes are in (\d+) hours\?", prompt):
        return str(int(m[1]) * 60)
    m = re.fullmatch(r"How many letters are in the word '(\w+)'\?", prompt)
    assert m, prompt
    return str(len(m[1]))


def test_responses_have_a_checkable_preference_order(tmp_path):
    files = generate(SyntheticTaskSpec("response", seed=17, candidates=6, queries={"test": 8}), tmp_path)
    cands, qrels, _ = read_response_jsonl(files["test"])
    assert cands["query_id"].n_unique() == 8
    sizes = cands.group_by("query_id").len()["len"]
    assert sizes.min() >= 4 and sizes.max() <= 6
    j = cands.join(qrels, on=["query_id", "doc_id"])
    raw = {}
    for line in files["test"].read_text().splitlines():
        r = json.loads(line)
        raw[r["id"]] = dict(zip(r["responses"], r["ranks"]))
    for (qid,), g in j.group_by("query_id"):
        ans = _expected(g["query"][0])
        ranks = raw[qid]
        assert list(ranks.values()).count(1) == 1, "exactly one best response"
        assert max(ranks.values()) >= 4, "always a clearly bad response"
        for text, rank in ranks.items():
            says = re.search(rf"(?<![\d,]){ans}(?![\d,])", text) is not None
            if rank <= 2:
                assert says, (text, ans)  # the two best give the correct answer
            else:
                assert not says, (text, ans)  # the others do not
        # Relevance follows the ranks: the best response has the highest grade.
        best = max(g["relevance"])
        assert g.filter(pl.col("relevance") == best)["doc"].to_list() == [t for t, r in ranks.items() if r == 1]


def test_spec_and_file_name_checks(tmp_path):
    with pytest.raises(ValueError, match="synthetic task 'rerank'"):
        SyntheticTaskSpec("rerank")
    with pytest.raises(ValueError, match="candidates must be 4..6"):
        SyntheticTaskSpec("response", candidates=8)
    with pytest.raises(ValueError, match="unknown split"):
        SyntheticTaskSpec("qa", queries={"dev": 3})
    with pytest.raises(ValueError, match="is written as 'questions.jsonl', not 'responses.jsonl'"):
        write_from_config({"task": "qa", "queries": {"test": 2}}, "test", tmp_path / "responses.jsonl")
    with pytest.raises(ValueError, match="split 'train' has no qa queries"):
        write_from_config({"task": "qa", "queries": {"test": 2}}, "train", tmp_path / "questions.jsonl")
    out = write_from_config({"task": "qa", "seed": 1, "candidates": 6, "queries": {"test": 2}}, "test", tmp_path / "t" / "questions.jsonl")
    assert read_hotpotqa_ircot(out).candidates.height == 12
