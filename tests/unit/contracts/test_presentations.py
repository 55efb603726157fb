"""Presentations, chunkings and stable seeds."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from presdep.contracts.presentations import (
    NoRelevantDocument,
    chunk,
    chunk_contiguous,
    chunk_positions,
    chunk_round_robin,
    middle_injection,
    random_shuffle,
    shuffle_seed,
    stable_seed,
    within_chunk,
)

ids_strategy = st.lists(st.text(min_size=1, max_size=4), min_size=0, max_size=40, unique=True)


def test_stable_seed_is_deterministic_and_type_tagged():
    assert stable_seed(7, "dl19", "q1", 0) == stable_seed(7, "dl19", "q1", 0)
    assert stable_seed(7, "dl19", "q1", 0) != stable_seed(7, "dl19", "q1", 1)
    assert stable_seed(7, "dl19", "q1", 0) != stable_seed(8, "dl19", "q1", 0)
    assert stable_seed(7, "1") != stable_seed(7, 1)
    assert stable_seed(7, "a", "b") != stable_seed(7, "b", "a")
    assert stable_seed(7, "ab") != stable_seed(7, "a", "b")
    assert 0 <= stable_seed(0) < 2**64
    with pytest.raises(TypeError, match="int or str"):
        stable_seed(7, 1.5)


def test_seeds_and_shuffles_stable_across_processes():
    code = (
        "import json;from presdep.contracts.presentations import stable_seed,random_shuffle,shuffle_seed,within_chunk;"
        "print(json.dumps([stable_seed(3,'dl19','q9',4), random_shuffle(list(range(30)), shuffle_seed(3,'dl19','q9',4)),"
        " within_chunk(list(range(30)), 7, stable_seed(3,'x'), 'round_robin')]))"
    )
    outs = []
    for hashseed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        outs.append(json.loads(res.stdout))
    here = [
        stable_seed(3, "dl19", "q9", 4),
        random_shuffle(list(range(30)), shuffle_seed(3, "dl19", "q9", 4)),
        within_chunk(list(range(30)), 7, stable_seed(3, "x"), "round_robin"),
    ]
    assert outs[0] == outs[1] == json.loads(json.dumps(here))


@given(ids_strategy, st.integers(0, 2**63))
def test_random_shuffle_is_a_permutation(ids, seed):
    out = random_shuffle(ids, seed)
    assert sorted(out) == sorted(ids)
    assert out == random_shuffle(ids, seed)


def test_random_shuffle_is_uniform_on_small_lists():
    # All 24 orders of 4 items appear with frequencies close to 1/24 (chi-square).
    counts = Counter(tuple(random_shuffle("abcd", stable_seed(1, i))) for i in range(4800))
    assert len(counts) == 24
    expected = 4800 / 24
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 60  # df = 23; p(chi2 > 60) < 1e-4


def test_different_queries_get_different_shuffles():
    base = list(range(50))
    a = random_shuffle(base, shuffle_seed(0, "d", "q1", 0))
    b = random_shuffle(base, shuffle_seed(0, "d", "q2", 0))
    c = random_shuffle(base, shuffle_seed(0, "d", "q1", 1))
    assert a != b and a != c


@given(st.integers(0, 60), st.integers(1, 25))
def test_chunkings_match_their_definitions(n, b):
    p = math.ceil(n / b) if n else 0
    for scheme in ("contiguous", "round_robin"):
        parts = chunk_positions(n, b, scheme)
        assert len(parts) == p
        assert sorted(x for part in parts for x in part) == list(range(n))
        assert all(1 <= len(part) <= b for part in parts)
        assert all(part == sorted(part) for part in parts)
    cont = chunk_positions(n, b, "contiguous")
    rr = chunk_positions(n, b, "round_robin")
    for i in range(n):
        assert i in cont[i // b]
        assert i in rr[i % p]  # prompt j = positions j, j+P, j+2P, ...
    ids = [f"d{i}" for i in range(n)]
    assert chunk_contiguous(ids, b) == chunk(ids, b, "contiguous")
    assert chunk_round_robin(ids, b) == [[ids[i] for i in part] for part in rr]


def test_round_robin_paper_geometry():
    parts = chunk_round_robin(list(range(100)), 20)
    assert len(parts) == 5
    assert parts[0] == list(range(0, 100, 5)) and parts[4] == list(range(4, 100, 5))


def test_bad_chunk_arguments():
    with pytest.raises(ValueError, match="positive"):
        chunk_positions(5, 0)
    with pytest.raises(ValueError, match="unknown chunking"):
        chunk_positions(5, 2, "random")


@settings(max_examples=60)
@given(ids_strategy, st.integers(1, 9), st.integers(0, 2**63), st.sampled_from(["contiguous", "round_robin"]))
def test_within_chunk_keeps_membership(ids, b, seed, scheme):
    out = within_chunk(ids, b, seed, scheme)
    before = chunk(ids, b, scheme)
    after = chunk(out, b, scheme)
    assert [sorted(x) for x in before] == [sorted(x) for x in after]
    assert out == within_chunk(ids, b, seed, scheme)


def test_within_chunk_changes_order_inside():
    ids = list(range(40))
    outs = {tuple(within_chunk(ids, 10, s)) for s in range(5)}
    assert len(outs) == 5


def test_middle_injection_positions_and_ties():
    ids = [f"d{i}" for i in range(9)]
    grades = {"d6": 2, "d3": 2, "d1": 1, "d8": 0}
    top, mid, bot = middle_injection(ids, grades)
    rest = [d for d in ids if d != "d3"]  # highest grade 2, tie d3 < d6 by id
    assert top == ["d3"] + rest
    assert mid.index("d3") == 9 // 2 and [d for d in mid if d != "d3"] == rest
    assert bot == rest + ["d3"]


def test_middle_injection_needs_relevant():
    with pytest.raises(NoRelevantDocument):
        middle_injection(["a", "b"], {"a": 0})
    # A single relevant document is still injected everywhere.
    assert middle_injection(["a"], {"a": 3}) == [["a"], ["a"], ["a"]]
