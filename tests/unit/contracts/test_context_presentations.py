"""The context decomposition's layout: presentations, real chunks and slots, and the donor choice
against hand-computed values."""

from __future__ import annotations

import hashlib
import random

import pytest

from presdep.contracts.context_presentations import (
    CANONICAL,
    Context,
    DonorPool,
    contexts,
    donations,
    donor_tie_hash,
    presentation_orders,
)
from presdep.contracts.errors import InvalidInput


def test_presentations_are_the_canonical_order_then_random_s_shuffles():
    got = presentation_orders(7, 3)
    assert list(got) == [CANONICAL, 0, 1, 2]
    assert got[CANONICAL] == list(range(7))
    for s in range(3):
        want = list(range(7))
        random.Random(s).shuffle(want)
        assert got[s] == want
    assert presentation_orders(3, 0) == {CANONICAL: [0, 1, 2]}
    with pytest.raises(InvalidInput, match="shuffles"):
        presentation_orders(3, -1)


def test_a_target_sits_in_its_real_chunk_at_its_slot():
    order = [4, 2, 0, 1, 3]
    got = contexts(order, 0, 2, "contiguous")
    assert [c.position for c in got] == [0, 1, 2, 3, 4]
    assert [(c.members, c.slot, c.width) for c in got] == [
        ((4, 2), 0, 2), ((4, 2), 1, 2), ((0, 1), 0, 2), ((0, 1), 1, 2), ((3,), 0, 1)]
    assert [c.target for c in got] == order
    # round robin: P = 3 prompts, prompt j holds positions j, j + 3
    rr = contexts(order, 0, 2, "round_robin")
    assert [(c.members, c.slot) for c in rr] == [((4, 1), 0), ((2, 3), 0), ((0,), 0), ((4, 1), 1), ((2, 3), 1)]


def test_the_donor_tie_hash_is_the_whole_sha256_digest():
    want = int(hashlib.sha256(b"donor:q7:-1:d3:2").hexdigest(), 16)
    assert donor_tie_hash("q7", CANONICAL, "d3", 2) == want
    assert donor_tie_hash("q7", 0, "d3", 2) != want


def test_the_nearest_length_donor_is_chosen_and_never_reused_in_a_context():
    pool = DonorPool({"x10": 10, "y13": 13, "z20": 20, "w7": 7})
    assert pool.choose(12, set(), 0) == ("y13", 1)
    assert pool.choose(12, {"y13"}, 0) == ("x10", 2)
    assert pool.choose(12, {"y13", "x10"}, 0) == ("w7", 5)  # 20 is 8 away, 7 is 5
    assert pool.choose(100, set(), 0) == ("z20", 80)
    with pytest.raises(InvalidInput, match="too few donor"):
        pool.choose(5, {"x10", "y13", "z20", "w7"}, 0)
    with pytest.raises(InvalidInput, match="no donor documents"):
        DonorPool({})


def test_ties_go_to_the_hash_mod_the_unused_tied_in_length_then_id_order():
    # 9 and 11 are both 1 away from 10: the tied list is (length, id) ordered: b9, a11, c11
    pool = DonorPool({"a11": 11, "c11": 11, "b9": 9, "far": 40})
    assert [pool.choose(10, set(), h)[0] for h in range(6)] == ["b9", "a11", "c11"] * 2
    # a11 used in this context: the tied list is b9, c11
    assert [pool.choose(10, {"a11"}, h) for h in range(4)] == [("b9", 1), ("c11", 1)] * 2
    assert [pool.choose(10, {"b9", "c11"}, h)[0] for h in range(3)] == ["a11"] * 3
    h = donor_tie_hash("q", 3, "t", 1)
    assert pool.choose(10, {"b9"}, h)[0] == ["a11", "c11"][h % 2]


def test_donations_replace_every_companion_by_hand():
    # pool of one query: lengths 5, 8, 12; target index 1 at slot 1 of the chunk (0, 1, 2)
    ctx = Context(presentation=CANONICAL, position=1, members=(0, 1, 2), slot=1)
    pool = DonorPool({"o4": 4, "o6": 6, "o12": 12, "o30": 30})
    got = donations(ctx, "q", ["d0", "d1", "d2"], [5, 8, 12], pool)
    # slot 0 (length 5): 4 and 6 tie at distance 1 -> drawn by the seed of slot 0
    first = ["o4", "o6"][int(hashlib.sha256(b"donor:q:-1:d1:0").hexdigest(), 16) % 2]
    assert [(g.slot, g.donor, g.length_error) for g in got] == [(0, first, 1), (2, "o12", 0)]


def test_choose_equals_the_tie_list_built_in_full():
    rng = random.Random(0)
    for _ in range(300):
        lengths = {f"d{i}": rng.randint(1, 12) for i in range(rng.randint(1, 15))}
        used = set(rng.sample(sorted(lengths), rng.randint(0, len(lengths) - 1)))
        length, tie_hash = rng.randint(0, 15), rng.getrandbits(256)
        unused = [d for d in lengths if d not in used]
        nearest = min(abs(lengths[d] - length) for d in unused)
        tied = sorted((lengths[d], d) for d in unused if abs(lengths[d] - length) == nearest)
        assert DonorPool(lengths).choose(length, used, tie_hash) == (tied[tie_hash % len(tied)][1], nearest)
