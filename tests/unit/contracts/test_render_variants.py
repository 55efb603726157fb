"""The render perturbations' variants: label styles, the random labels' and permutations' draws,
separators, the rubric's paraphrases and scales, and each scale's exact mapping."""

from __future__ import annotations

import random

import numpy as np
import pytest

from presdep.contracts.errors import InvalidInput
from presdep.contracts.render_variants import (
    KINDS,
    SCALES,
    VARIANTS,
    Render,
    random_labels,
    relabelled,
    render_of,
    style_labels,
)


def test_label_styles_by_hand():
    assert style_labels("numeric", 3) == ["1", "2", "3"]
    assert style_labels("alpha", 28)[:3] == ["A", "B", "C"] and style_labels("alpha", 28)[25:] == ["Z", "AA", "AB"]
    assert style_labels("doc", 2) == ["Doc-1", "Doc-2"]
    assert style_labels("roman", 20) == ["i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix", "x", "xi", "xii",
                                         "xiii", "xiv", "xv", "xvi", "xvii", "xviii", "xix", "xx"]
    with pytest.raises(InvalidInput, match="unknown label style 'greek'"):
        style_labels("greek", 2)


def test_random_labels_are_three_characters_drawn_by_seed_times_10000_plus_i():
    labels = random_labels(7, 20)
    assert all(len(x) == 3 and x.isalnum() and x.upper() == x for x in labels)
    # Label i: three draws of Random(seed * 10000 + i).choice over A-Z then 0-9.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    for i in (1, 2, 20):
        rng = random.Random(7 * 10000 + i)
        assert labels[i - 1] == "".join(alphabet[rng.randrange(36)] for _ in range(3))
    assert random_labels(7, 3) == labels[:3] and random_labels(8, 3) != labels[:3]


def test_a_non_canonical_permutation_is_never_the_identity():
    for seed in range(50):
        for n in (2, 3, 20):
            labels = [str(i) for i in range(n)]
            shown = relabelled(labels, seed)
            assert sorted(shown) == sorted(labels) and shown != labels
    assert relabelled(["A"], 0) == ["A"]


def test_render_of_each_kind():
    assert all(render_of(k, 0, 4, seed=0, rubric="relevance_v2") is None for k in KINDS)
    relabel = render_of("id_relabel", 1, 4, seed=0, rubric="relevance_v2")
    assert sorted(relabel.line_labels) == ["A", "B", "C", "D"] and relabel.line_labels != ("A", "B", "C", "D")
    assert relabel.label_range == ("A", "D") and relabel.separator == "newline" and relabel.template is None
    assert [render_of("separator", v, 4, seed=0, rubric="x").separator
            for v in range(1, VARIANTS)] == ["dash", "hash", "xml", "passage"]
    assert render_of("scale", 4, 4, seed=0, rubric="relevance_v2").template == "relevance_words_v2"
    with pytest.raises(InvalidInput, match="rubric 'answer_support_v2' has no shipped variants"):
        render_of("rubric_paraphrase", 1, 4, seed=0, rubric="answer_support_v2")
    with pytest.raises(InvalidInput, match="variant 5 outside 0..4"):
        render_of("separator", 5, 4, seed=0, rubric="relevance_v2")
    assert Render(line_labels=("A", "A")).line_labels == ("A", "A")  # drawn-once random labels may repeat
    with pytest.raises(InvalidInput, match="line labels must be non-empty"):
        Render(line_labels=("A", ""))
    with pytest.raises(InvalidInput, match="free of brackets"):
        Render(line_labels=("A]", "B"))


@pytest.mark.parametrize("scale, grade, unit", [
    ("0-3", 0, 0.0), ("0-3", 2, 2 / 3), ("0-3", 3, 1.0),
    ("0-9", 0, 0.0), ("0-9", 3, 3 * 10 / 9 / 10), ("0-9", 9, 1.0),
    ("1-5", 0, 0.0), ("1-5", 2, 0.5), ("1-5", 4, 1.0),  # grades "1", "3", "5"
    ("anchored", 1, 1 / 3), ("anchored", 2, 2 / 3), ("anchored", 3, 1.0),  # grades "3", "6", "9"
    ("words", 0, 0.0), ("words", 2, 2 / 3), ("words", 3, 1.0),  # Not, Strong, Full
])
def test_each_scale_maps_a_certain_grade_exactly(scale, grade, unit):
    s = SCALES[scale]
    probs = np.zeros((1, len(s.tokens)))
    probs[0, grade] = 1.0
    assert s.unit(probs)[0] == unit
    assert s.score(probs)[0] == pytest.approx(3 * unit, abs=1e-15)


def test_scales_map_the_expected_grade_as_the_paper_does():
    rng = np.random.default_rng(0)
    for name, s in SCALES.items():
        p = rng.dirichlet(np.ones(len(s.tokens)), size=4)
        e = p @ np.array([float(t) if t.isdigit() else i for i, t in enumerate(s.tokens)])
        want = {"0-3": e / 3, "0-9": e * 10 / 9 / 10, "1-5": (e - 1) / 4, "anchored": e / 9, "words": e / 3}[name]
        assert np.allclose(s.unit(p), want, rtol=0, atol=1e-15), name
    p = rng.dirichlet(np.ones(4), size=3)
    assert np.array_equal(SCALES["0-3"].score(p), p @ np.arange(4.0))  # the 0-3 score is E[g] itself
    with pytest.raises(InvalidInput, match=r"expected \[slots, 10\]"):
        SCALES["0-9"].unit(p)
