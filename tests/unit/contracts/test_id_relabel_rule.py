"""The id_relabel rule (METHODS.md v5): one label permutation per non-canonical variant, the same
for every query and prompt, equal to ``Random(seed).shuffle`` of the variant's label list with the
first two swapped when the shuffle is the identity; random labels drawn once from
``Random(seed * 10000 + i)`` and kept on a collision. The expected values are computed here from
the rule's text, not from the code under test."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scorers_tiny import fixture

from presdep.contracts.render_variants import random_labels, render_of
from presdep.scoring import GradeReadout
from presdep.scoring.render_run import score_renders

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def drawn_once(seed: int, n: int) -> list[str]:
    """Label i (1-based): three draws of one ``Random(seed * 10000 + i)``'s choice over A-Z then 0-9."""
    out = []
    for i in range(1, n + 1):
        rng = random.Random(seed * 10000 + i)
        out.append("".join(rng.choice(ALPHABET) for _ in range(3)))
    return out


def variant_labels(variant: int, n: int, seed: int) -> list[str]:
    """The label list of each non-canonical variant, in item order, written out by hand."""
    roman = ["i", "ii", "iii", "iv", "v", "vi", "vii"]
    return {1: [chr(ord("A") + i) for i in range(n)], 2: [f"Doc-{i}" for i in range(1, n + 1)],
            3: roman[:n], 4: drawn_once(seed, n)}[variant]


def shown_labels(labels: list[str], seed: int) -> list[str]:
    """The v5 permutation: ``Random(seed).shuffle`` of the list; the identity -> swap the first two."""
    shown = labels[:]
    random.Random(seed).shuffle(shown)
    if shown == labels:
        shown[0], shown[1] = shown[1], shown[0]
    return shown


def identity_seed(n: int) -> int:
    """A seed whose shuffle of n items leaves them in place (so the swap must decide)."""
    return next(s for s in range(10_000) if shown_after_shuffle(n, s) == list(range(n)))


def shown_after_shuffle(n: int, seed: int) -> list[int]:
    items = list(range(n))
    random.Random(seed).shuffle(items)
    return items


@pytest.mark.parametrize("seed", [0, 5, identity_seed(3), identity_seed(4)])
@pytest.mark.parametrize("width", [3, 4])
def test_each_variant_shows_its_labels_in_the_seeds_one_shuffle(seed, width):
    for variant in range(1, 5):
        labels = variant_labels(variant, width, seed)
        render = render_of("id_relabel", variant, width, seed=seed, rubric="relevance_v2")
        assert list(render.line_labels) == shown_labels(labels, seed), (variant, seed, width)
        assert render.label_range == (labels[0], labels[-1])


def test_an_identity_shuffle_swaps_the_first_two():
    seed = identity_seed(4)
    render = render_of("id_relabel", 1, 4, seed=seed, rubric="relevance_v2")
    assert render.line_labels == ("B", "A", "C", "D")


class Recorder:
    """A scorer that records every render it is asked to read (each slot scores 0)."""

    name = "recorder"

    def __init__(self):
        self.renders = []

    def score_slots(self, requests):
        self.renders += [r.render for r in requests if r.render is not None and r.render.line_labels]
        return [[GradeReadout(0.0) for _ in r.read] for r in requests]


def test_one_permutation_per_variant_for_every_query_and_prompt():
    seed, queries, prompts = 3, 5, 2
    recorder = Recorder()
    score_renders(fixture(6, 8)[0], recorder, b=4, chunking="contiguous", kinds=("id_relabel",), seed=seed,
                  queries=queries)
    seen = Counter(tuple(r.line_labels) for r in recorder.renders)
    want = {tuple(shown_labels(variant_labels(v, 4, seed), seed)) for v in range(1, 5)}
    # Every one of the 5 queries x 2 prompts shows each variant's one permutation, and no other.
    assert set(seen) == want
    assert all(count == queries * prompts for count in seen.values())


def test_random_labels_are_drawn_once_and_kept_on_a_collision():
    # Find a seed and width where the drawn-once labels collide (36^3 labels: a few seeds do by 200).
    seed, n = next((s, n) for s in range(100) for n in range(2, 201)
                   if len(set(drawn_once(s, n))) < n)
    labels = drawn_once(seed, n)
    assert labels[-1] in labels[:-1]  # the n-th label repeats an earlier one
    assert random_labels(seed, n) == labels
    render = render_of("id_relabel", 4, n, seed=seed, rubric="relevance_v2")
    assert list(render.line_labels) == shown_labels(labels, seed)
