"""The render perturbations' variants (docs/methods/render-perturbations.md): the order stays the
canonical one and the prompt's surface changes. Each kind has five variants, variant 0 the
canonical prompt:

* ``id_relabel``: the documents' labels: numeric ``1``, ``A``, ``Doc-1``, roman ``i``, three random
  characters of [A-Z0-9]; a non-canonical variant also permutes its labels across the slots
  (``Random(seed).shuffle``, never the identity; one permutation per variant, not per query or
  prompt), so a label no longer says where its document sits.
* ``separator``: what sets the documents apart: a newline, a dash line, a hash line, XML tags,
  a ``Passage N`` header line; the labels stay ``[1]``..``[n]``.
* ``rubric_paraphrase``: the rubric and four paraphrases of it (templates shipped beside it).
* ``scale``: 0-3, 0-9, 1-5, anchored 0/3/6/9 and a four-word scale, each with its own rubric,
  placeholder grade and grade tokens; a read maps to [0, 1] by the paper's rule, times 3 (the
  0-3 score's units, so one threshold reads every scale).

The draws are the paper's: ``Random(seed)`` and ``Random(seed * 10000 + i)``, ``seed`` the
configuration's ``render_perturbations.seed``.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from presdep.contracts.errors import InvalidInput

KINDS = ("id_relabel", "separator", "rubric_paraphrase", "scale")
VARIANTS = 5
LABEL_STYLES = ("numeric", "alpha", "doc", "roman", "random")
SEPARATORS = ("newline", "dash", "hash", "xml", "passage")
RANDOM_ALPHABET = string.ascii_uppercase + string.digits
RANDOM_LABEL_CHARS = 3
# The rubric's paraphrases and its scales: template names shipped in presdep/scoring/templates,
# variant 0 the rubric itself. Only the relevance rubric has them.
PARAPHRASES = {"relevance_v2": ("relevance_v2", "relevance_para1_v2", "relevance_para2_v2",
                                "relevance_para3_v2", "relevance_para4_v2")}
SCALE_TEMPLATES = {"relevance_v2": ("relevance_v2", "relevance_scale09_v2", "relevance_scale15_v2",
                                    "relevance_anchored_v2", "relevance_words_v2")}


def _roman(n: int) -> str:
    out = []
    for value, sym in ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"), (50, "l"),
                       (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")):
        count, n = divmod(n, value)
        out.append(sym * count)
    return "".join(out)


def _alpha(n: int) -> str:
    """A, B, .., Z, AA, AB, ..: bijective base 26."""
    out = ""
    while n:
        n, r = divmod(n - 1, 26)
        out = string.ascii_uppercase[r] + out
    return out


def random_labels(seed: int, n: int) -> list[str]:
    """Labels 1..n of the random style: label i is 3 characters of [A-Z0-9] drawn once from
    ``Random(seed * 10000 + i)``. A label equal to an earlier one is kept, as the paper's code keeps
    it (the readout finds a line by its position, not its label)."""
    out: list[str] = []
    for i in range(1, n + 1):
        rng = random.Random(seed * 10000 + i)
        out.append("".join(rng.choice(RANDOM_ALPHABET) for _ in range(RANDOM_LABEL_CHARS)))
    return out


def style_labels(style: str, n: int, seed: int = 0) -> list[str]:
    """The labels of items 1..n in a style of :data:`LABEL_STYLES`, in item order."""
    if style == "numeric":
        return [str(i) for i in range(1, n + 1)]
    if style == "alpha":
        return [_alpha(i) for i in range(1, n + 1)]
    if style == "doc":
        return [f"Doc-{i}" for i in range(1, n + 1)]
    if style == "roman":
        return [_roman(i) for i in range(1, n + 1)]
    if style == "random":
        return random_labels(seed, n)
    raise InvalidInput(f"unknown label style {style!r}; expected one of {LABEL_STYLES}")


def relabelled(labels: Sequence[str], seed: int) -> list[str]:
    """The labels a non-canonical variant shows, in slot order: ``labels`` shuffled by
    ``Random(seed)``, the first two swapped when the shuffle left the list as it was (a one-label
    list has no other order). The same ``seed`` for every query and prompt: one permutation per
    variant and width."""
    shown = list(labels)
    random.Random(seed).shuffle(shown)
    if shown == list(labels) and len(shown) > 1:
        shown[0], shown[1] = shown[1], shown[0]
    return shown


@dataclass(frozen=True)
class Render:
    """How a prompt's surface differs from the canonical one (the order never does).

    ``line_labels``: the label of each skeleton line, in slot order (None: ``1``..``lines``);
    ``label_range``: the first and last label the rubric's output form names (None: ``1`` and
    the number of documents shown); ``separator``: a name of :data:`SEPARATORS`; ``template``: a
    shipped rubric that replaces the scorer's own (None: the scorer's)."""

    line_labels: tuple[str, ...] | None = None
    label_range: tuple[str, str] | None = None
    separator: str = "newline"
    template: str | None = None

    def __post_init__(self):
        if self.separator not in SEPARATORS:
            raise InvalidInput(f"unknown separator {self.separator!r}; expected one of {SEPARATORS}")
        if self.line_labels is not None:
            # Repeats are allowed: random labels are drawn once and may collide (the paper's rule).
            bad = [x for x in self.line_labels if not x or any(c in x for c in "[]\n")]
            if bad:
                raise InvalidInput(f"line labels must be non-empty and free of brackets and newlines; "
                                   f"got {self.line_labels}")


def render_of(kind: str, variant: int, width: int, *, seed: int, rubric: str) -> Render | None:
    """The surface of variant ``variant`` of ``kind`` for a prompt of ``width`` documents
    (None: the canonical prompt, variant 0 of every kind); the same for every query and prompt."""
    if kind not in KINDS:
        raise InvalidInput(f"unknown render perturbation {kind!r}; expected one of {KINDS}")
    if not 0 <= variant < VARIANTS:
        raise InvalidInput(f"{kind}: variant {variant} outside 0..{VARIANTS - 1}")
    if variant == 0:
        return None
    if kind == "id_relabel":
        labels = style_labels(LABEL_STYLES[variant], width, seed)
        return Render(line_labels=tuple(relabelled(labels, seed)), label_range=(labels[0], labels[-1]))
    if kind == "separator":
        return Render(separator=SEPARATORS[variant])
    table = PARAPHRASES if kind == "rubric_paraphrase" else SCALE_TEMPLATES
    if rubric not in table:
        raise InvalidInput(f"{kind}: the rubric {rubric!r} has no shipped variants; {kind} reads {sorted(table)}")
    return Render(template=table[rubric][variant])


@dataclass(frozen=True)
class Scale:
    """A grade scale: the grade strings read (in value order), the skeleton's placeholder, and the
    value each grade maps to on [0, 1]."""

    name: str
    tokens: tuple[str, ...]
    placeholder: str
    # E over these numbers, then (E - offset) / span: the paper's mapping of each scale.
    numbers: tuple[float, ...]
    offset: float
    span: float

    def unit(self, probs: np.ndarray) -> np.ndarray:
        """Per row of P(grade) ([slots, grades]), the expected grade mapped to [0, 1]."""
        probs = np.asarray(probs, dtype=np.float64)
        if probs.ndim != 2 or probs.shape[1] != len(self.tokens):
            raise InvalidInput(f"scale {self.name}: probabilities of shape {probs.shape}, expected "
                               f"[slots, {len(self.tokens)}]")
        expected = probs @ np.asarray(self.numbers, dtype=np.float64)
        if self.name == "0-9":
            return expected * 10 / 9 / 10  # the paper: E x 10/9, then / 10
        return (expected - self.offset) / self.span

    def score(self, probs: np.ndarray) -> np.ndarray:
        """The score in the 0-3 scale's units: 3 x :meth:`unit` (the 0-3 scale: E itself)."""
        if self.name == DEFAULT_SCALE:
            return np.asarray(probs, dtype=np.float64) @ np.arange(4, dtype=np.float64)
        return 3 * self.unit(probs)


SCALES = {
    "0-3": Scale("0-3", ("0", "1", "2", "3"), "0", (0, 1, 2, 3), 0, 3),
    "0-9": Scale("0-9", tuple(str(i) for i in range(10)), "0", tuple(range(10)), 0, 9),
    "1-5": Scale("1-5", ("1", "2", "3", "4", "5"), "1", (1, 2, 3, 4, 5), 1, 4),
    "anchored": Scale("anchored", ("0", "3", "6", "9"), "0", (0, 1 / 3, 2 / 3, 1), 0, 1),
    "words": Scale("words", ("Not", "Weak", "Strong", "Full"), "Not", (0, 1, 2, 3), 0, 3),
}
DEFAULT_SCALE = "0-3"


def scale_named(name: str | None, where: str = "") -> Scale:
    """A scale of :data:`SCALES` (None: 0-3)."""
    if name is None:
        return SCALES[DEFAULT_SCALE]
    if name not in SCALES:
        raise InvalidInput(f"{where}: unknown scale {name!r}; expected one of {sorted(SCALES)}")
    return SCALES[name]


def check_kinds(kinds: Sequence[str]) -> list[str]:
    """The unknown names among ``kinds``."""
    return [k for k in kinds if k not in KINDS]


__all__ = ["DEFAULT_SCALE", "KINDS", "LABEL_STYLES", "PARAPHRASES", "Render", "SCALES", "SCALE_TEMPLATES",
           "SEPARATORS", "Scale", "VARIANTS", "check_kinds", "random_labels", "relabelled", "render_of", "scale_named",
           "style_labels"]
