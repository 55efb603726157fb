"""The deterministic grader: hand-worked answers, documented limits, and the weak-policy gate."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from presdep.bench import suite
from presdep.bench.grader import parse_number, score_answer

NUM = {"id": "n", "answer": "1217", "answer_type": "number", "options": None}
LST = {"id": "l", "answer": "Arlo, Bexa, Corin, Dusa", "answer_type": "list",
       "options": ["Dusa", "Arlo", "Corin", "Bexa"]}


@pytest.mark.parametrize("reply, expected", [
    ("1217", 1), ("  1217\n", 1), ("1,217", 1), ("1217.0", 1), ("$1,217", 1), ("USD 1217", 1),
    ("1217 dollars", 1), ("The answer is 1217.", 1), ("ANSWER: 1217 coins", 1),
    ("Step 1: 56 + 180 = 236. Final answer: 1217", 1),
    ("```\n1217\n```", 1), ('```json\n{"answer": 1217}\n```', 1), ('{"answer": "1,217"}', 1),
    ('{"reasoning": "12 x 3", "answer": 1217}', 1), ('{"value": 1217}', 1),
    ('First {"answer": 5}, corrected: {"answer": 1217}', 1),
    ("1218", 0), ("121.7", 0), ("12170", 0), ("", 0), (None, 0), ("no idea", 0), ("-1217", 0),
    ('{"answer": 1217, "confidence": 9, "x": 1}', 1),
    ("1217 apples, not 3", 0),  # documented limit: the stray last number is read
])
def test_number_answers(reply, expected):
    assert score_answer(NUM, reply) == expected


@pytest.mark.parametrize("reply, expected", [
    ("Arlo, Bexa, Corin, Dusa", 1), ("arlo bexa corin dusa", 1), ("Answer: Arlo > Bexa > Corin > Dusa", 1),
    ('```json\n{"answer": ["Arlo", "Bexa", "Corin", "Dusa"]}\n```', 1),
    ("Corin is shorter than Bexa.\nArlo, Bexa, Corin, Dusa", 1),  # the last line naming everyone counts
    ("Dusa, Arlo, Corin, Bexa", 0), ("Arlo, Bexa, Corin", 0), ("Arlo", 0), ("Dusa, Corin, Bexa, Arlo", 0),
    ("Arlowen, Bexa, Corin, Dusa", 0),  # whole words only
])
def test_list_answers(reply, expected):
    assert score_answer(LST, reply) == expected


def test_unknown_answer_type_is_named():
    with pytest.raises(ValueError, match="task 'x': unknown answer_type 'essay'"):
        score_answer({"id": "x", "answer": "1", "answer_type": "essay"}, "1")


def test_parse_number_ignores_currency_and_separators():
    assert parse_number("costs \u20ac2,500.50 in total") == 2500.5
    assert parse_number("x3 and 7") == 7.0  # 'x3' is glued to a letter: not a number
    assert parse_number("none") is None


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+", text)


WEAK_POLICIES = {
    "empty": lambda t: "",
    "constant 0": lambda t: "0",
    "constant 1": lambda t: "1",
    "constant yes": lambda t: "yes",
    "refusal": lambda t: "I'm sorry, but I can't help with that request.",
    "repeat the question": lambda t: t["prompt"],
    "first number in the prompt": lambda t: (_numbers(t["prompt"]) or [""])[0],
    "last number in the prompt": lambda t: (_numbers(t["prompt"]) or [""])[-1],
    "first option": lambda t: t["options"][0] if t["options"] else t["prompt"].split()[0],
}


@pytest.mark.parametrize("policy", list(WEAK_POLICIES))
def test_weak_policies_score_below_ten_percent_overall_and_per_family(policy):
    tasks = suite.read_split(suite.PUBLIC_PATH)
    assert len(tasks) == 300
    fam_scores: dict[str, list[int]] = defaultdict(list)
    for t in tasks:
        fam_scores[t["family"]].append(score_answer(t, WEAK_POLICIES[policy](t)))
    overall = sum(sum(v) for v in fam_scores.values()) / len(tasks)
    assert overall < 0.10, (policy, overall)
    assert set(fam_scores) == set(suite.FAMILIES)
    for fam, s in fam_scores.items():
        assert sum(s) / len(s) < 0.10, (policy, fam, sum(s) / len(s))


def test_right_answers_in_every_format_score_one():
    # The grader is not the bottleneck: the expected answer, plainly or labelled, always passes.
    for t in suite.read_split(suite.PUBLIC_PATH):
        assert score_answer(t, t["answer"]) == 1, t["id"]
        assert score_answer(t, f"Reasoning...\nAnswer: {t['answer']}") == 1, t["id"]
