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
    # the plateau values are EXACTLY equal (the same per-query F1s), and the higher one wins
    plateau = np.flatnonzero((grid > 1.0) & (grid <= 2.0))
    assert len(set(f1[plateau].tolist())) == 1 and dec.best_grid_index(f1) == plateau.max()


def test_threshold_grid_is_passed_in_and_spans_the_scores_it_is_built_from():
    # METHODS v3 item 4: the grid spans ALL queries; F1 is averaged over the tuned ones only
    dev = [np.array([1.0, 0.0])]
    rel = [np.array([True, False])]
    other = [np.array([4.0, -4.0])]  # e.g. a test-half query
    grid = dec.threshold_grid(dev + other)
    np.testing.assert_array_equal(grid, np.linspace(-4.0, 4.0, 41))
    g, f1 = dec.threshold_curve(dev, rel, grid=grid)
    assert g is not None and np.array_equal(g, grid)
    # kept only doc 0 (F1 1) for 0 < t <= 1: grid values 0.2 .. 1.0; the highest is 1.0
    want = [1.0 if 0 < t <= 1.0 else (2 / 3 if t <= 0 else 0.0) for t in np.linspace(-4.0, 4.0, 41)]
    np.testing.assert_allclose(f1, want)
    assert dec.tune_threshold(dev, rel, grid=grid) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="ascending"):
        dec.threshold_curve(dev, rel, grid=grid[::-1])


def test_ties_in_mean_f1_are_exact_no_tolerance():
    grid = np.array([0.0, 1.0, 2.0, 3.0])
    # exact tie at 1 and 3: walking upwards with >=, the higher (3) wins
    assert dec.best_grid_index([0.2, 0.6, 0.1, 0.6]) == 3
    # 1e-15 apart is NOT a tie: the larger F1 wins although its threshold is lower
    # (v2's 1e-12 tolerance would have taken index 3)
    f1 = [0.2, 0.6, 0.1, 0.6 - 1e-15]
    assert f1[3] != f1[1]
    assert dec.best_grid_index(f1) == 1 and grid[dec.best_grid_index(f1)] == 1.0
    f1 = [0.2, 0.6 - 1e-15, 0.1, 0.6]
    assert dec.best_grid_index(f1) == 3
    # every value equal: the top of the grid
    assert dec.best_grid_index([0.5] * 4) == 3
    assert not hasattr(dec, "_TIE_EPS")


def test_mean_f1_near_tie_end_to_end_is_not_a_tie():
    # Two grid values whose mean F1 is 0.9 in exact arithmetic but differs in the last bit of
    # the float sum (query order): v2's 1e-12 tolerance called it a tie and took the higher
    # threshold; v3's exact ``>=`` keeps the larger float, here at the LOWER threshold.
    scores = [np.array([4.0, 6.0, 0.0]), np.array([4.0, 3.0, 2.0]), np.array([1.0, 5.0, 4.0]),
              np.array([1.0, 0.0, 6.0])]
    rel = [np.array([1, 1, 0], bool), np.array([1, 0, 1], bool), np.array([1, 1, 1], bool),
           np.array([1, 1, 1], bool)]
    grid, f1 = dec.threshold_curve(scores, rel)
    assert grid[0] == 0.0 and grid[6] == pytest.approx(0.9) and grid[-1] == 6.0
    # grid 0, 0.15, ..., 6. Hand F1 per query = 2|S & R| / (|S| + |R|):
    # t = 0 keeps everything: 4/5, 4/5, 1, 1; t = 0.9 drops q1's doc 2 and q4's doc 1: 1, 4/5, 1, 4/5
    at0 = (((0.8 + 0.8) + 1.0) + 1.0) / 4
    at09 = (((1.0 + 0.8) + 1.0) + 0.8) / 4
    assert at0 == 0.9 and at09 == 0.8999999999999999 and at09 != at0 and at0 - at09 < 1e-12
    assert f1[0] == at0 and f1[6] == at09
    assert f1.max() == at0 and (f1[7:] < at09).all() and (f1[1:6] <= at09).all()
    assert dec.tune_threshold(scores, rel) == 0.0  # v2 gave 0.9


def test_mean_f1_is_the_papers_arithmetic_bit_for_bit():
    """Exact ties make the last bit matter: per query P = tp/|S|, R = tp/|R| (0 when empty), F1 =
    2PR/(P+R) (0 when P + R = 0), then the float64 mean over queries in order; written out here
    in Python floats and compared with ==, on integer-grade scores where ties are common."""
    rng = np.random.default_rng(7)
    scores = [rng.integers(0, 4, size=int(rng.integers(3, 12))).astype(float) for _ in range(37)]
    rel = [rng.random(len(x)) < 0.4 for x in scores]
    grid, f1 = dec.threshold_curve(scores, rel)
    for g, t in enumerate(grid.tolist()):
        per_query = []
        for x, r in zip(scores, rel):
            kept = [float(v) >= t for v in x]
            tp = sum(k and bool(y) for k, y in zip(kept, r))
            n_ret, n_rel = sum(kept), int(r.sum())
            p = tp / n_ret if n_ret else 0.0
            rc = tp / n_rel if n_rel else 0.0
            per_query.append(2 * p * rc / (p + rc) if (p + rc) > 0 else 0.0)
        assert f1[g] == float(np.mean(per_query)), t


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
    # METHODS v3 set flip: ever retained U = {a, b, c}; a is in every set, b and c are not
    assert flip == pytest.approx(2 / 3)
    assert size == 2.0


def test_set_flip_is_the_share_of_ever_retained_docs_that_change():
    # S0 = {a, b, c}, S1 = {a, b, c}, S2 = {a, b, c}, S3 = {a, b}: U = {a, b, c}, only c changes.
    # v2's "share of pairs that differ" would give 3/6 = 0.5; v3 gives 1/3.
    s = np.array([[0.9, 0.8, 0.7, 0.0], [0.9, 0.8, 0.7, 0.0], [0.9, 0.8, 0.7, 0.0], [0.9, 0.8, 0.1, 0.0]])
    assert dec.set_stats(s, 0.5)[1] == pytest.approx(1 / 3)
    assert dec.pair_stats(s >= 0.5)[1] == pytest.approx(1 / 3)
    # every doc retained somewhere but never by all: flip 1
    assert dec.pair_stats(np.array([[True, False], [False, True]]))[1] == 1.0
    # identical sets: flip 0
    assert dec.pair_stats(np.array([[True, False], [True, False]]))[1] == 0.0


def test_jaccard_edge_cases():
    both_empty = np.array([[0.1, 0.2], [0.2, 0.1]])
    # nothing ever retained: U empty, nothing changed -> set flip 0 (and Jaccard 1)
    assert dec.set_stats(both_empty, 0.5)[:2] == (1.0, 0.0)
    one_empty = np.array([[0.9, 0.2], [0.2, 0.1]])
    # U = {a}; a is not in the second set -> flip 1
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
            ever = frozenset().union(*sets)
            changed = [d for d in ever if not all(d in x for x in sets)]
            assert f == pytest.approx(len(changed) / len(ever) if ever else 0.0)
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
    np.testing.assert_array_equal(dec.selected_grade(s, ids, grades), [1, 1, 1])
    assert dec.selected_grade(np.array([[0.0, 0.5, 1.0]]), ids, grades).tolist() == [0.0]


def test_selected_quality_is_the_grade_over_the_prompts_maximum_grade():
    ids = ["b", "a", "c"]
    grades = [3, 1, 0]  # b = 3, a = 1, c = 0; the prompt's maximum grade is 3
    s = np.array([[1.0, 1.0, 0.0], [5.0, 0.0, 1.0], [0.0, 0.0, 1.0]])  # selected a, b, c
    np.testing.assert_allclose(dec.selected_quality(s, ids, grades), [1 / 3, 3 / 3, 0 / 3])
    # the maximum comes from the prompt's judged responses when given (here a grade 2 elsewhere)
    np.testing.assert_allclose(dec.selected_quality(s, ids, [2, 1, 0], max_grade=4), [1 / 4, 2 / 4, 0.0])
    # a prompt whose best response has grade 0: undefined (NaN), never 0/0 or 0
    assert np.isnan(dec.selected_quality(s, ids, [0, 0, 0])).all()


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
    # METHODS v3 item 8: with one presentation the answer flip is 0, not undefined
    assert qa.answer_flip(["only one"]) == 0.0
    assert math.isnan(qa.answer_flip([]))  # no answer at all: nothing to measure
