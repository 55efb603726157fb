"""Threshold, Jaccard, flips and QA answer metrics against small hand-worked examples."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from presdep.metrics import decisions as dec
from presdep.metrics import qa


def test_threshold_hand_example_ties_go_to_the_higher_value():
    # q1: S={3,2} is perfect for 1 < t <= 2; q2: S={2.5} is perfect for 0.5 < t <= 2.5.
    scores = [np.array([3.0, 2.0, 1.0, 0.0]), np.array([2.5, 0.5, 0.0, 0.0])]
    rel = [np.array([1, 1, 0, 0], bool), np.array([1, 0, 0, 0], bool)]
    grid, f1 = dec.threshold_curve(scores, rel)
    np.testing.assert_allclose(grid, np.linspace(0.0, 3.0, 41))
    # hand values at a few grid points
    at = {0.0: (2 * 2 / 6 + 2 * 1 / 5) / 2, 0.3: (2 * 2 / 5 + 2 * 1 / 3) / 2, 1.5: 1.0, 2.25: (2 / 3 + 1) / 2, 3.0: (2 / 3 + 0) / 2}
    for t, v in at.items():
        assert f1[np.argmin(abs(grid - t))] == pytest.approx(v)
    # every grid value in (1, 2] is optimal; the highest is 26 * 0.075 = 1.95
    assert dec.tune_threshold(scores, rel) == pytest.approx(1.95)


def test_threshold_query_without_relevant_doc_scores_f1_zero():
    # METHODS v2: a query with no relevant doc contributes F1 0 whatever is retained
    # (v1 gave 1 to the empty set, which pulled t* up to "retain nothing").
    grid, f1 = dec.threshold_curve([np.array([1.0, 0.0])], [np.array([False, False])])
    assert (f1 == 0.0).all()
    scores = [np.array([1.0, 0.0]), np.array([0.5, 0.2])]
    rel = [np.array([True, False]), np.array([False, False])]
    # grid 0, 0.025, ..., 1; q1 F1 = 1 for t in (0, 1] (keeps only the relevant doc), 2/3 at t = 0;
    # q2 always 0, so mean F1 = 0.5 on (0, 1]: every such value ties, the highest (1.0) wins.
    grid, f1 = dec.threshold_curve(scores, rel)
    assert f1[0] == pytest.approx((2 / 3) / 2) and np.allclose(f1[1:], 0.5)
    assert dec.tune_threshold(scores, rel) == 1.0
    # The tie rule moves t* to the top of the plateau even when it keeps less elsewhere.
    scores = [np.array([4.0, 2.0, 0.0]), np.array([3.0, 1.0, 0.0])]
    rel = [np.array([True, True, False]), np.array([False, False, False])]
    # q1 perfect for t in (0, 2] = grid values 0.1 .. 2.0; q2 contributes 0 everywhere
    assert dec.tune_threshold(scores, rel) == pytest.approx(2.0)


def test_jaccard_flip_and_size_hand_example():
    # docs a b c d; t = 0.5; S0 = {a,b}, S1 = {a,b}, S2 = {a,c}
    s = np.array([[0.9, 0.8, 0.1, 0.0], [0.6, 0.7, 0.2, 0.4], [0.9, 0.1, 0.5, 0.3]])
    jac, flip, size = dec.set_stats(s, 0.5)
    assert jac == pytest.approx((1 + 1 / 3 + 1 / 3) / 3)
    assert flip == pytest.approx(2 / 3)
    assert size == 2.0


def test_jaccard_edge_cases():
    both_empty = np.array([[0.1, 0.2], [0.2, 0.1]])
    assert dec.set_stats(both_empty, 0.5)[:2] == (1.0, 0.0)
    one_empty = np.array([[0.9, 0.2], [0.2, 0.1]])
    assert dec.set_stats(one_empty, 0.5)[:2] == (0.0, 1.0)
    jac, flip, size = dec.set_stats(np.array([[0.9, 0.1]]), 0.5)  # single presentation
    assert math.isnan(jac) and math.isnan(flip) and size == 1.0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_set_stats_many_equals_python_sets(m, n, seed):
    rng = np.random.default_rng(seed)
    blocks = [rng.integers(0, 3, (m, n)).astype(float) for _ in range(3)] + [rng.random((m + 1, n + 2))]
    jac, flip, size = dec.set_stats_many(blocks, 1.0)
    for b, j, f, s in zip(blocks, jac, flip, size):
        sets = [frozenset(np.flatnonzero(row >= 1.0)) for row in b]
        pairs = list(itertools.combinations(sets, 2))
        if pairs:
            ej = np.mean([1.0 if not (x | y) else len(x & y) / len(x | y) for x, y in pairs])
            assert j == pytest.approx(ej)
            assert f == pytest.approx(np.mean([x != y for x, y in pairs]))
        else:
            assert math.isnan(j) and math.isnan(f)
        assert s == pytest.approx(np.mean([len(x) for x in sets]))


def test_pair_and_selection_flip_hand_example():
    ids = ["r1", "r2", "r3", "r4"]
    s = np.array(
        [
            [0.9, 0.5, 0.4, 0.1],  # (r1, r4)
            [0.9, 0.6, 0.3, 0.2],  # (r1, r4)
            [0.9, 0.9, 0.3, 0.3],  # ties by (-score, id ascending): order r1 r2 r3 r4 -> (r1, r4)
            [0.8, 0.2, 0.1, 0.7],  # (r1, r3)
        ]
    )
    assert dec.top_bottom(s, ids) == [("r1", "r4"), ("r1", "r4"), ("r1", "r4"), ("r1", "r3")]
    assert dec.pair_flip(s, ids) == pytest.approx(1 - 3 / 4)
    assert dec.selection_flip(s, ids) == 0.0
    assert math.isnan(dec.pair_flip(s[:1], ids))
    assert dec.pair_flip(np.tile(s[0], (3, 1)), ids) == 0.0


def test_response_ties_go_to_the_smaller_id_and_ids_compare_as_strings():
    ids = ["b", "a", "c"]  # stored order is not id order
    s = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    # row 0: a and b tie on top -> a; bottom c.  row 1: a, c tie -> a on top; bottom b.
    # row 2: all tie -> order a, b, c.
    assert dec.top_bottom(s, ids) == [("a", "c"), ("a", "b"), ("a", "c")]
    grades = [3, 1, 0]  # b = 3, a = 1, c = 0
    np.testing.assert_array_equal(dec.selected_quality(s, ids, grades), [1, 1, 1])
    assert dec.selected_quality(np.array([[0.0, 0.5, 1.0]]), ids, grades).tolist() == [0.0]


def test_matched_retention_hand_example():
    # canonical (row 0) keeps 2 docs at t = 0.5; every row then keeps its top 2 by (-score, position)
    s = np.array([[0.9, 0.8, 0.1, 0.0], [0.3, 0.2, 0.25, 0.1], [0.7, 0.7, 0.7, 0.0]])
    pos = np.array([[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 1, 3]])
    kept = dec.matched_kept(s, pos, 2)
    # row 1: {a, c}; row 2: three tie at 0.7, positions b=0, c=1 win -> {b, c}
    assert kept.tolist() == [[True, True, False, False], [True, False, True, False], [False, True, True, False]]
    jac, flip = dec.pair_stats(kept)
    assert jac == pytest.approx((1 / 3 + 1 / 3 + 1 / 3) / 3)
    assert flip == 1.0
    # at t = 0.5 itself row 1 keeps nothing and row 2 keeps three: the control removes that
    assert dec.pair_stats(s >= 0.5)[0] == pytest.approx((0 + 2 / 3 + 0) / 3)


def test_retained_quality_hand_example():
    kept = np.array([[True, True, False, False], [False, False, False, False], [True, True, True, True]])
    rel = np.array([True, False, True, False])
    q = dec.retained_quality(kept, rel)
    np.testing.assert_allclose(q["precision"], [0.5, 0.0, 0.5])
    np.testing.assert_allclose(q["recall"], [0.5, 0.0, 1.0])
    np.testing.assert_allclose(q["f1"], [0.5, 0.0, 2 * 2 / 6])
    np.testing.assert_allclose(q["retention"], [0.5, 0.0, 1.0])
    none = dec.retained_quality(kept, np.zeros(4, bool))
    assert (none["f1"] == 0).all() and (none["recall"] == 0).all()


def test_mode_flip():
    assert dec.mode_flip(["a", "b", "a", "c", "a"]) == pytest.approx(1 - 3 / 5)
    assert math.isnan(dec.mode_flip(["a"]))


def test_squad_normalisation():
    assert qa.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert qa.normalize_answer("An apple a day, the end.") == "apple day end"
    assert qa.normalize_answer("Theatre") == "theatre"  # articles only as whole words


def test_em_and_f1_hand_examples():
    assert qa.exact_match("the Paris", ["London", "paris."]) == 1.0
    assert qa.exact_match("Paris France", "Paris") == 0.0
    # pred tokens [big, red, car], gold [red, car]: P = 2/3, R = 1, F1 = 0.8
    assert qa.f1_score("the big red car", "red car") == pytest.approx(0.8)
    # max over golds
    assert qa.f1_score("red car", ["blue bike", "a red car"]) == 1.0
    assert qa.f1_score("nothing", "something else") == 0.0
    # SQuAD v2 empty rule
    assert qa.f1_score("the", "a") == 1.0
    assert qa.f1_score("the", "x") == 0.0
    with pytest.raises(ValueError):
        qa.exact_match("x", [])


def test_f1_yes_no_rule():
    # token F1 would give 2/3 ("yes" vs "yes it is"); the HotpotQA rule gives 0
    assert qa.f1_score("yes", "yes it is") == 0.0
    assert qa.f1_score("Yes it is", "yes") == 0.0
    assert qa.f1_score("no answer", "noanswer") == 0.0  # normalises to "no answer", not "noanswer"
    assert qa.f1_score("No.", "no") == 1.0
    assert qa.f1_score("no", "yes") == 0.0
    assert qa.f1_score("yes", ["Paris", "yes"]) == 1.0
    # neither side special: ordinary token F1
    assert qa.f1_score("red car", "the red car is") == pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3))


def test_answer_flip_hand_example():
    assert qa.answer_flip(["Paris", "paris.", "Lyon", "the Paris"]) == pytest.approx(0.25)
    assert qa.answer_flip(["a", "b", "c", "d"]) == pytest.approx(0.75)
    assert qa.answer_flip(["x", "X"]) == 0.0
    assert math.isnan(qa.answer_flip(["only one"]))
