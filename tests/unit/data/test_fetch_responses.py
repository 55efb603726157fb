"""Response converters: hand-made rows in each source's published schema -> rank_llm JSON + TREC qrels."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from fetch_helpers import SHARED_DATA, fetch_catalogue_entry, requires_file

from presdep.data.fetch.run import fetch
from presdep.data.rank_llm import read_rank_llm_json
from presdep.data.trec import read_qrels


def _entry(converter: str, **extra) -> dict:
    return {"task": "response", "source": {"kind": "hf_datasets", "converter": converter, "local": {"path": "x"}},
            "first_stage": {"kind": "none"}, **extra}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _blind(group: str, i: int) -> str:
    """The spec of a label-blind id, restated: 12 hex digits of sha256('<group>\\0<index>')."""
    return hashlib.sha256(f"{group}\0{i}".encode()).hexdigest()[:12]


def _convert(tmp_path: Path, path: Path, converter: str, **extra):
    out = tmp_path / "out"
    manifest = fetch("x", _entry(converter, **extra), out, layout="ranked", local={"path": str(path)})
    cands = read_rank_llm_json(out / "candidates.json")
    grades = {(q, d): r for q, d, r in read_qrels(out / "qrels.txt").select("query_id", "doc_id", "relevance").iter_rows()}
    return cands, grades, manifest


def _check_blind_order(cands, qid: str, n: int) -> None:
    got = cands.filter(cands["query_id"] == qid).sort("first_stage_rank")["doc_id"].to_list()
    assert got == sorted(_blind(qid, i) for i in range(n))


def test_converter_rewardbench2(tmp_path: Path) -> None:
    rows = [{"id": "1", "prompt": "Name a prime.", "chosen": ["2"], "rejected": ["4", "6", "9"],
             "num_correct": 1, "num_incorrect": 3, "total_completions": 4, "models": ["a", "b", "c", "d"],
             "subset": "Math", "additional_metadata": {"category": None}}]
    cands, grades, manifest = _convert(tmp_path, _jsonl(tmp_path / "test.jsonl", rows), "rewardbench2")
    texts = dict(zip(cands["doc_id"], cands["doc"]))
    assert {texts[d]: g for (q, d), g in grades.items()} == {"2": 1, "4": 0, "6": 0, "9": 0}
    assert texts[_blind("1", 0)] == "2"
    _check_blind_order(cands, "1", 4)
    assert manifest.rows == {"queries": 1, "candidates": 4, "judgements": 4, "candidates_per_query": {"min": 4, "max": 4},
                             "duplicate_texts": {"sets": 0, "duplicates": 0}}


def _nectar_row(i: int, n_answers: int = 7, empty: bool = False) -> dict:
    answers = [{"answer": "" if empty and r == 3 else f"answer  {r}\nof prompt {i}", "model": f"m{r}", "rank": float(r)}
               for r in range(1, n_answers + 1)]
    return {"prompt": f"\n\nHuman: earlier turn {i}\n\nAssistant: ok\n\nHuman:  question   {i} \n\nAssistant:",
            "answers": answers, "turns": 2, "num_responses": n_answers, "source": ["sharegpt"], "good_natured": True}


def test_converter_nectar_is_the_papers_pool(tmp_path: Path) -> None:
    """The paper's pool, restated from docs/methods/populations.md: random.Random(42).sample of the row
    indices, sorted, numbered nectar-000000.. before filtering; exactly 7 non-empty answers kept."""
    import random

    from presdep.data.fetch.responses import nectar

    rows = [_nectar_row(i, n_answers=6 if i == 9 else 7, empty=i == 14) for i in range(20)]
    path = _jsonl(tmp_path / "nectar.jsonl", rows)
    got = list(nectar(path, rows=12))
    picked = sorted(random.Random(42).sample(range(20), 12))
    want = {f"nectar-{j:06d}": r for j, r in enumerate(picked) if r not in (9, 14)}
    assert [q.query_id for q in got] == list(want)  # a dropped row leaves a gap in the numbering
    for q in got:
        r = want[q.query_id]
        assert q.query == f"question {r}"  # the last Human turn, whitespace-collapsed
        order = [f"answer of prompt {r}".replace("answer", f"answer {k}") for k in range(1, 8)]
        random.Random(int(hashlib.sha1(q.query_id.encode()).hexdigest()[:8], 16)).shuffle(order)
        assert [t for _, t, _ in q.docs] == order
        assert [d for d, _, _ in q.docs] == [f"{q.query_id}-r{p:02d}" for p in range(1, 8)]
        by_rank = {t: int(t.split()[1]) for t in order}
        assert {t: q.grades[d] for d, t, _ in q.docs} == {t: {1: 3, 2: 2, 3: 2, 4: 1, 5: 1, 6: 0, 7: 0}[k]
                                                         for t, k in by_rank.items()}
    # Fewer rows than the pool: every row, in file order, through the fetch as the catalogue runs it.
    cands, grades, _ = _convert(tmp_path, _jsonl(tmp_path / "few.jsonl", rows[:3]), "nectar")
    assert sorted(cands["query_id"].unique().to_list()) == ["nectar-000000", "nectar-000001", "nectar-000002"]
    assert sorted(g for (q, _), g in grades.items() if q == "nectar-000001") == [0, 0, 1, 1, 2, 2, 3]


def test_converter_ppe(tmp_path: Path) -> None:
    row = {"question_id": "q-17", "question": "2+2?", "options": ["3", "4"], "answer": "B", "answer_index": 1,
           "category": "math", "model_name": "m", "parsed_outputs": ["B"] * 32, "mean_score": 0.5,
           "prompt": "What is 2+2?", "scores": [True, False, True, False, False, False, False, True] + [True] * 24,
           **{f"response_{i}": f"r{i}" for i in range(1, 33)}}
    cands, grades, _ = _convert(tmp_path, _jsonl(tmp_path / "train.jsonl", [row]), "ppe", responses_per_prompt=8)
    texts = dict(zip(cands["doc_id"], cands["doc"]))
    assert {texts[d]: g for (q, d), g in grades.items()} == {
        "r1": 1, "r2": 0, "r3": 1, "r4": 0, "r5": 0, "r6": 0, "r7": 0, "r8": 1}
    _check_blind_order(cands, "q-17", 8)


def test_converter_ultrafeedback_grades(tmp_path: Path) -> None:
    def completion(text: str, score: float) -> dict:
        return {"model": "m", "principle": "helpfulness", "custom_system_prompt": "", "response": text,
                "annotations": {"helpfulness": {"Rating": "4", "Rationale": ""}}, "critique": "c",
                "fine-grained_score": 4.0, "overall_score": score}

    row = {"source": "evol_instruct", "instruction": "Write a haiku.", "models": ["a", "b", "c", "d"],
           "completions": [completion("a", 3.5), completion("b", 4.0), completion("c", 7.5), completion("d", 8.0)],
           "correct_answers": ["None"], "incorrect_answers": ["None"]}
    cands, grades, _ = _convert(tmp_path, _jsonl(tmp_path / "ultrafeedback.jsonl", [row]), "ultrafeedback",
                                grades={"from": "overall_score", "thresholds": [4, 6, 8]})
    texts = dict(zip(cands["doc_id"], cands["doc"]))
    # Thresholds 4, 6, 8 at or below the score: 3.5 -> 0, 4 -> 1, 7.5 -> 2, 8 -> 3.
    assert {texts[d]: g for (q, d), g in grades.items()} == {"a": 0, "b": 1, "c": 2, "d": 3}


def test_converter_rm_bench_json(tmp_path: Path) -> None:
    rows = [{"id": 7, "prompt": "Say hi.", "chosen": ["hi", "Hi!", "**Hi**"], "rejected": ["no", "No!", "**No**"], "domain": "chat"}]
    path = tmp_path / "chat_filtered.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    cands, grades, _ = _convert(tmp_path, path, "rm_bench_json")
    texts = dict(zip(cands["doc_id"], cands["doc"]))
    assert sorted(texts[d] for (q, d), g in grades.items() if g == 1) == ["**Hi**", "Hi!", "hi"]
    assert sorted(texts[d] for (q, d), g in grades.items() if g == 0) == ["**No**", "No!", "no"]
    # Label-blind: RM-Bench's own ids, sha256("<prompt id>\0<chosen|rejected>\0<index>"), ascending.
    ids = cands.sort("first_stage_rank")["doc_id"].to_list()
    assert ids == sorted(ids)
    assert hashlib.sha256(b"7\0chosen\x000").hexdigest()[:12] in ids


def test_missing_field_names_file_and_row(tmp_path: Path) -> None:
    from presdep.contracts.errors import InputFormatError

    with pytest.raises(InputFormatError, match=r"test.jsonl, line 2: prompt lacks \['rejected'\]"):
        _convert(tmp_path, _jsonl(tmp_path / "test.jsonl", [
            {"id": "1", "prompt": "p", "chosen": ["a"], "rejected": ["b"]}, {"id": "2", "prompt": "p", "chosen": ["a"]}]),
            "rewardbench2")


REAL = SHARED_DATA / "rm-bench" / "chat_filtered.json"


@requires_file(REAL, "real RM-Bench")
def test_real_rm_bench_through_the_catalogue_entry(tmp_path: Path) -> None:
    from presdep.data.responses import read_responses

    out = tmp_path / "out"
    manifest = fetch_catalogue_entry("rm-bench", REAL, out, layout="ranked")
    # Measured on this file: 12 prompts list one response text twice.
    assert manifest.rows == {"queries": 129, "candidates": 129 * 6, "judgements": 129 * 6,
                             "candidates_per_query": {"min": 6, "max": 6}, "duplicate_texts": {"sets": 12, "duplicates": 12}}
    # The same candidates and grades as reading the original with the project's RM-Bench reader.
    direct_c, direct_q = read_responses(REAL, "rm_bench_json")[:2]
    cands = read_rank_llm_json(out / "candidates.json")
    assert cands.sort(["query_id", "first_stage_rank"]).select("query_id", "doc_id", "doc").equals(
        direct_c.sort(["query_id", "first_stage_rank"]).select("query_id", "doc_id", "doc"))
    got = read_qrels(out / "qrels.txt").sort(["query_id", "doc_id"])
    assert got.select("query_id", "doc_id", "relevance").equals(
        direct_q.sort(["query_id", "doc_id"]).select("query_id", "doc_id", "relevance").cast(got.schema))
