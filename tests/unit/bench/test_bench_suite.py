"""The seeded task suite: byte-stable public split, refused hidden split, answers checked by an
independent solver that reads each prompt (not the generator's parameters)."""

from __future__ import annotations

import json
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from presdep.bench import suite

PUBLIC = Path(suite.__file__).with_name("data") / "public.jsonl"


@pytest.fixture(scope="module")
def tasks():
    return suite.read_split(PUBLIC)


def test_public_split_regenerates_byte_identically(tmp_path):
    out = suite.write_public_split(tmp_path / "public.jsonl")
    assert out.read_bytes() == PUBLIC.read_bytes()
    # Same seed, same text; another seed, another split.
    assert suite.split_text(suite.generate_split(suite.PUBLIC_SEED)) == PUBLIC.read_text(encoding="utf-8")
    assert suite.split_text(suite.generate_split(suite.PUBLIC_SEED + 1)) != PUBLIC.read_text(encoding="utf-8")


def test_shape_of_the_public_split(tasks):
    assert len(tasks) == 300
    assert Counter(t["family"] for t in tasks) == {f: 50 for f in suite.FAMILIES}
    assert Counter(t["variant"] for t in tasks) == {v: 60 for v in suite.VARIANTS}
    items = {t["item"] for t in tasks}
    assert len(items) == 60
    for t in tasks:
        assert t["id"] == f"{t['item']}-{t['variant']}"
    by_item: dict[str, list] = {}
    for t in tasks:
        by_item.setdefault(t["item"], []).append(t)
    for item, ts in by_item.items():
        assert sorted(t["variant"] for t in ts) == list(suite.VARIANTS)
        assert len({t["answer"] for t in ts}) == 1, item  # paraphrases share one answer
        assert len({t["prompt"] for t in ts}) == 5, item  # and differ in wording


def test_hidden_split_needs_a_private_seed_and_never_collides(tmp_path, tasks):
    with pytest.raises(suite.SuiteError, match="explicit private seed"):
        suite.write_hidden_split(tmp_path / "hidden", None)
    with pytest.raises(suite.SuiteError, match="public seed"):
        suite.write_hidden_split(tmp_path / "hidden", suite.PUBLIC_SEED)
    assert not (tmp_path / "hidden").exists()
    path = suite.write_hidden_split(tmp_path / "hidden", 987654321)
    hidden = suite.read_split(path)
    assert len(hidden) == 300 and all(t["id"].startswith("hid-") for t in hidden)
    assert not {t["id"] for t in hidden} & {t["id"] for t in tasks}
    assert {t["prompt"] for t in hidden} != {t["prompt"] for t in tasks}


def test_hidden_folder_is_git_ignored():
    lines = (Path(__file__).resolve().parents[3] / ".gitignore").read_text().splitlines()
    assert "/bench-hidden/" in lines


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _solve(task: dict) -> str:
    """Independent solution from the v1/v4 wording of each family."""
    p, fam = task["prompt"], task["family"]
    if fam == "arithmetic":  # v4: "Compute a + b * c - d"
        a, b, c, d = _ints(re.search(r"Compute (.*) and", p).group(1))
        return str(a + b * c - d)
    if fam == "remainder":  # v1: "remainder when n is divided by k"
        n, k = _ints(p)
        return str(n % k)
    if fam == "rule_tracing":  # v1: "x = s ... this rule t times"
        s = int(re.search(r"x = (\d+)", p).group(1))
        t = int(re.search(r"rule (\d+) times", p).group(1))
        for _ in range(t):
            s = s // 2 if s % 2 == 0 else 3 * s + 1
        return str(s)
    if fam == "sequence":  # find the lowest-order rule that fits all five terms
        terms = _ints(p)
        d1 = [b - a for a, b in zip(terms, terms[1:])]
        if len(set(d1)) == 1:
            return str(terms[-1] + d1[0])
        ratios = {Fraction(b, a) for a, b in zip(terms, terms[1:])}
        if len(ratios) == 1:
            return str(int(terms[-1] * ratios.pop()))
        d2 = [b - a for a, b in zip(d1, d1[1:])]
        assert len(set(d2)) == 1, p
        return str(terms[-1] + d1[-1] + d2[0])
    if fam == "set_counting":  # v1: "First list: ... Second list: ... <question>"
        m = re.match(r"First list: (.*)\. Second list: (.*)\. (.*)$", p)
        a, b = set(m.group(1).split(", ")), set(m.group(2).split(", "))
        q = m.group(3)
        if "at least one" in q:
            return str(len(a | b))
        if "in both" in q:
            return str(len(a & b))
        assert "missing from the second" in q, q
        return str(len(a - b))
    if fam == "ordering":  # v1: facts "X is taller than Y."
        facts = re.findall(r"(\w+) is taller than (\w+)\.", p)
        people = set(task["options"])
        # Brute force: the one permutation consistent with every fact.
        from itertools import permutations

        fits = [o for o in permutations(sorted(people))
                if all(o.index(x) < o.index(y) for x, y in facts)]
        assert len(fits) == 1, p
        return ", ".join(fits[0])
    raise AssertionError(fam)


def test_answers_match_an_independent_solver(tasks):
    solve_on = {"arithmetic": "v4", "remainder": "v1", "rule_tracing": "v1", "sequence": "v1",
                "set_counting": "v1", "ordering": "v1"}
    checked = 0
    for t in tasks:
        if t["variant"] == solve_on[t["family"]]:
            assert _solve(t) == t["answer"], t["id"]
            checked += 1
    assert checked == 60


def test_paraphrases_carry_the_same_numbers(tasks):
    by_item: dict[str, list] = {}
    for t in tasks:
        by_item.setdefault(t["item"], []).append(t)
    for item, ts in by_item.items():
        if ts[0]["family"] in ("arithmetic", "remainder", "sequence"):
            assert len({tuple(sorted(_ints(t["prompt"]))) for t in ts}) == 1, item


def test_read_split_names_file_and_line(tmp_path):
    good = json.loads(PUBLIC.read_text().splitlines()[0])
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(suite.SuiteError, match=r"s\.jsonl:2: not valid JSON"):
        suite.read_split(p)
    p.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(suite.SuiteError, match=r"s\.jsonl:2: duplicate task id 'arith-01-v1' \(first on line 1\)"):
        suite.read_split(p)
    p.write_text(json.dumps({**good, "extra": 1}) + "\n")
    with pytest.raises(suite.SuiteError, match=r"s\.jsonl:1: task keys"):
        suite.read_split(p)
    p.write_text(json.dumps({**good, "answer_type": "essay"}) + "\n")
    with pytest.raises(suite.SuiteError, match="answer_type 'essay'"):
        suite.read_split(p)
    p.write_text("")
    with pytest.raises(suite.SuiteError, match="no tasks"):
        suite.read_split(p)
