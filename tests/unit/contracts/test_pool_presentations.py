"""The pool perturbation's stable seed, drop rank, query sample and the three lists."""

from __future__ import annotations

import hashlib
import random

import pytest

from presdep.contracts.errors import InvalidInput
from presdep.contracts.pool_presentations import (
    default_depth,
    drop_rank,
    paper_stable_seed,
    pool_lists,
    sample_queries,
)
from presdep.contracts.presentations import stable_seed


def sha_seed(seed: int, qid: str, namespace: str) -> int:
    """The definition, written out: first 8 bytes, big-endian, of sha256("seed\\0qid\\0namespace")."""
    digest = hashlib.sha256(str(seed).encode() + b"\x00" + qid.encode("utf-8") + b"\x00" + namespace.encode()).digest()
    return int.from_bytes(digest[:8], "big")


@pytest.mark.parametrize("seed, qid, namespace", [(0, "q1", "drop-rank"), (42, "q1", "drop-rank"),
                                                   (0, "1", "query-sample"), (7, "ü-7", "query-sample")])
def test_seed_is_sha256_of_the_nul_joined_parts(seed, qid, namespace):
    assert paper_stable_seed(seed, qid, namespace) == sha_seed(seed, qid, namespace)


def test_seed_literals_computed_once():
    assert paper_stable_seed(0, "q1", "drop-rank") == 11186852685377933448
    assert paper_stable_seed(42, "q1", "drop-rank") == 16886113865234127638
    assert paper_stable_seed(0, "1", "query-sample") == 12467897934781273407


def test_seed_is_not_presdeps_json_stable_seed():
    assert paper_stable_seed(0, "q1", "drop-rank") != stable_seed(0, "q1", "drop-rank")


def test_seed_refuses_a_bool_or_a_float_seed_and_a_non_string_query():
    for bad in (True, 1.0):
        with pytest.raises(InvalidInput, match="seed must be an integer"):
            paper_stable_seed(bad, "q1", "drop-rank")
    with pytest.raises(InvalidInput, match="strings"):
        paper_stable_seed(0, 1, "drop-rank")


def test_drop_rank_is_random_randrange_of_the_seed():
    for seed, qid in ((0, "q1"), (42, "q1"), (0, "1"), (3, "ü-7")):
        assert drop_rank(seed, qid) == random.Random(sha_seed(seed, qid, "drop-rank")).randrange(100)
        assert drop_rank(seed, qid, pool=7) == random.Random(sha_seed(seed, qid, "drop-rank")).randrange(7)
    assert (drop_rank(0, "q1"), drop_rank(42, "q1"), drop_rank(0, "1"), drop_rank(0, "ü-7")) == (82, 10, 57, 98)


def test_query_sample_keeps_the_first_n_in_seed_order():
    qids = [f"q{i}" for i in range(30)]
    expected = sorted(qids, key=lambda q: sha_seed(5, q, "query-sample"))[:10]
    assert sample_queries(qids, 5, n=10) == expected
    assert sample_queries(list(reversed(qids)), 5, n=10) == expected  # input order does not matter
    assert sample_queries([str(i) for i in range(10)], 0, 3) == ["8", "3", "0"]
    assert sample_queries(qids[:4], 5, n=10) == sorted(qids[:4], key=lambda q: sha_seed(5, q, "query-sample"))


def test_query_sample_refuses_a_repeated_query():
    with pytest.raises(InvalidInput, match="'q1' is listed twice"):
        sample_queries(["q1", "q2", "q1"], 0)


def test_lists_keep_first_stage_order_and_append_the_next_candidate_last():
    ids = [f"d{i}" for i in range(105)]
    lists = pool_lists(ids, 37)
    assert lists["canonical"] == ids[:100]
    assert len(lists["drop"]) == 99 and "d37" not in lists["drop"]
    assert lists["drop"] == ids[:37] + ids[38:100]  # survivors never reordered
    assert lists["replace"] == lists["drop"] + ["d100"]
    assert len(lists["replace"]) == 100


def test_lists_drop_at_the_edges_and_with_a_smaller_pool():
    ids = list(range(8))
    assert pool_lists(ids, 0, pool=6) == {"canonical": [0, 1, 2, 3, 4, 5], "replace": [1, 2, 3, 4, 5, 6],
                                          "drop": [1, 2, 3, 4, 5]}
    assert pool_lists(ids, 5, pool=6)["replace"] == [0, 1, 2, 3, 4, 6]
    assert default_depth(100) == 101


def test_lists_refuse_too_few_candidates_naming_the_query_and_its_count():
    with pytest.raises(InvalidInput, match=r"query 'q9' has 100 candidates; it needs at least 101"):
        pool_lists(list(range(100)), 3, query_id="q9")
    with pytest.raises(InvalidInput, match=r"has 101 candidates; it needs at least 120"):
        pool_lists(list(range(101)), 3, depth=120, query_id="q9")


def test_lists_refuse_a_bad_drop_rank_depth_or_repeated_document():
    with pytest.raises(InvalidInput, match="drop rank"):
        pool_lists(list(range(101)), 100)
    with pytest.raises(InvalidInput, match="depth"):
        pool_lists(list(range(101)), 3, depth=100)
    with pytest.raises(InvalidInput, match="twice"):
        pool_lists([0, 1, 2, 1], 0, pool=3)
