"""The cyclic shuffle rule: a balanced (Latin) design of rotations inside fixed prompts."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from presdep.config.records import Protocol
from presdep.config.schema_enums import SCHEMA_PATH
from presdep.config.yaml_io import load_yaml
from presdep.contracts.presentations import SHUFFLE_RULES, chunk_positions, cyclic_order, shuffle_order

CHUNKINGS = st.sampled_from(["contiguous", "round_robin"])


def test_a_hand_worked_rotation():
    # n = 5, B = 3, contiguous: prompts [0 1 2] and [3 4]; m = 1 moves slot k to slot k + 1 (mod size).
    assert cyclic_order(5, 0, 3) == [0, 1, 2, 3, 4]
    assert cyclic_order(5, 1, 3) == [2, 0, 1, 4, 3]
    assert cyclic_order(5, 2, 3) == [1, 2, 0, 3, 4]
    # round robin: P = 2 prompts, positions [0 2 4] and [1 3]
    assert cyclic_order(5, 1, 3, "round_robin") == [4, 3, 0, 1, 2]


@settings(max_examples=80)
@given(st.integers(1, 40), st.integers(1, 9), CHUNKINGS)
def test_prompts_keep_their_members_and_rotations_visit_every_slot_once(n, b, chunking):
    prompts = chunk_positions(n, b, chunking)
    first_stage = [sorted(pos) for pos in prompts]  # documents of each prompt in first-stage order
    longest = max(len(pos) for pos in prompts)
    seen: dict[int, Counter] = {d: Counter() for d in range(n)}
    for m in range(longest):
        order = cyclic_order(n, m, b, chunking)
        assert sorted(order) == list(range(n))
        cut = [[order[x] for x in pos] for pos in prompts]
        assert [sorted(c) for c in cut] == first_stage  # companions never change
        if m == 0:
            assert order == list(range(n))  # presentation 0 is the first-stage order
        for c in cut:
            for slot, d in enumerate(c):
                seen[d][slot] += 1
    for pos in prompts:
        if longest % len(pos) == 0:  # a prompt of L members is balanced over any multiple of L rotations
            for d in pos:
                assert seen[d] == Counter({s: longest // len(pos) for s in range(len(pos))})
    # Rotations repeat with each prompt's size: m and m + L give a prompt of L the same order.
    for m in range(3):
        a, c = cyclic_order(n, m, b, chunking), cyclic_order(n, m + longest, b, chunking)
        for pos in prompts:
            if longest % len(pos) == 0:
                assert [a[x] for x in pos] == [c[x] for x in pos]


def test_a_short_last_prompt_is_unbalanced_when_its_size_does_not_divide_m():
    # n = 7, B = 4: prompts of 4 and 3; over M = 4 rotations a member of the short prompt sits
    # twice in one slot (rotation 3 = rotation 0 there).
    slots = Counter()
    for m in range(4):
        order = cyclic_order(7, m, 4)
        slots[order[4:].index(4)] += 1
    assert sorted(slots.values()) == [1, 1, 2]


def test_shuffle_order_reads_b_and_chunking_for_the_cyclic_rule_only():
    kw = {"base_seed": 1, "dataset": "d", "query_id": "q"}
    assert shuffle_order(10, 3, "cyclic", b=4, chunking="round_robin", **kw) == cyclic_order(10, 3, 4, "round_robin")
    with pytest.raises(ValueError, match="chunk size B"):
        shuffle_order(10, 3, "cyclic", **kw)
    assert shuffle_order(10, 3, "paper", b=4, **kw) == shuffle_order(10, 3, "paper", **kw)
    with pytest.raises(ValueError, match="non-negative"):
        cyclic_order(10, -1, 4)


def test_the_schema_and_the_config_checks_name_the_same_rules():
    schema = load_yaml(SCHEMA_PATH)["properties"]
    assert tuple(schema["protocol"]["properties"]["shuffle_rule"]["enum"]) == SHUFFLE_RULES
    dataset = schema["datasets"]["additionalProperties"]["properties"]["shuffle_rule"]["enum"]
    assert tuple(dataset) == SHUFFLE_RULES
    proto = {"seed": 1, "M": 4, "B": 4, "perturbations": ["random_shuffle"], "max_doc_chars": 50}
    assert Protocol.checked({**proto, "shuffle_rule": "cyclic"}).shuffle_rule == "cyclic"
