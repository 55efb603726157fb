"""The decisions the flip ledger classifies, each as a rule over one query's presentations.

A rule turns scores (M, n) and presented positions (M, n) into, per presentation, the
decision's value and its margin: the smallest change of the scores that would reverse it
(docs/methods/flip-ledger.md#the-margin-of-a-decision). A margin of exactly 0 means the tie
rule set the value. The same rule is applied to the real scores, to the noise reads, to the
within-chunk presentations and to the scores the additive slot fit predicts, so every test
compares like with like.

Per-document rules (``retained``, ``matched``) give (M, n) values; per-query rules
(``reader_input``, ``selected``, ``pair``) give one text value per presentation and the
documents that value names (for the parse test).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from presdep.metrics import decisions


@dataclass(frozen=True)
class Decided:
    """One rule applied to one query's presentations."""

    values: np.ndarray  # per document: (M, n) bool; per query: (M,) object array of str
    margins: np.ndarray  # (M, n) or (M,), >= 0
    named: list[np.ndarray] | None = None  # per query: the doc indices each presentation's value names


@dataclass(frozen=True)
class Retained:
    """d in S = {score >= t*}: one score against a fixed threshold."""

    t_star: float
    name: ClassVar[str] = "retained"
    per_doc: ClassVar[bool] = True
    relative: ClassVar[bool] = False  # d's own score decides
    kappa: ClassVar[int] = 1  # one read's noise can close the margin

    def decide(self, scores: np.ndarray, positions: np.ndarray, doc_ids: Sequence[str]) -> Decided:
        s = np.asarray(scores, dtype=np.float64)
        return Decided(s >= self.t_star, np.abs(s - self.t_star))


@dataclass(frozen=True)
class Matched:
    """d among the top n by (-score, presented position), n = the number of documents the
    first row (the canonical presentation of the set given) keeps at t*: the matched cut."""

    t_star: float
    name: ClassVar[str] = "matched"
    per_doc: ClassVar[bool] = True
    relative: ClassVar[bool] = True  # d's rank decides: another document's read can move it
    kappa: ClassVar[int] = 2  # the margin is a difference of two documents' scores

    def decide(self, scores: np.ndarray, positions: np.ndarray, doc_ids: Sequence[str]) -> Decided:
        s = np.asarray(scores, dtype=np.float64)
        n = s.shape[1]
        n_keep = int((s[0] >= self.t_star).sum())
        if not 0 < n_keep < n:  # keeping all or none is the same in every row: nothing to reverse
            return Decided(np.full(s.shape, n_keep == n), np.full(s.shape, np.inf))
        order = np.lexsort((np.asarray(positions), -s), axis=-1)
        kept = decisions.matched_kept(s, positions, n_keep)
        worst_kept = np.take_along_axis(s, order[:, n_keep - 1 : n_keep], axis=1)
        best_out = np.take_along_axis(s, order[:, n_keep : n_keep + 1], axis=1)
        return Decided(kept, np.where(kept, s - best_out, worst_kept - s))


def _gaps(s: np.ndarray, order: np.ndarray) -> np.ndarray:
    """(M, n - 1) score gaps between neighbours of each presentation's order (>= 0)."""
    ranked = np.take_along_axis(s, order, axis=1)
    return ranked[:, :-1] - ranked[:, 1:]


@dataclass(frozen=True)
class ReaderInput:
    """The reader's top k paragraphs by (-score, presented position), in that order."""

    k: int
    name: ClassVar[str] = "reader_input"
    per_doc: ClassVar[bool] = False
    kappa: ClassVar[int] = 2

    def decide(self, scores: np.ndarray, positions: np.ndarray, doc_ids: Sequence[str]) -> Decided:
        s = np.asarray(scores, dtype=np.float64)
        order = np.lexsort((np.asarray(positions), -s), axis=-1)
        ids = np.asarray(doc_ids, dtype=object)
        top = order[:, : self.k]
        values = np.array([" > ".join(ids[row]) for row in top], dtype=object)
        n = s.shape[1]
        # The order inside the top k and the cut after it: gaps 0..k-1 (fewer in a pool of <= k).
        g = _gaps(s, order)[:, : min(self.k, n - 1)]
        margins = g.min(axis=1) if g.shape[1] else np.full(s.shape[0], np.inf)
        return Decided(values, margins, [row for row in top])


def _response_order(scores: np.ndarray, doc_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order by (-score, response id ascending) per presentation, the ids, the gaps along it)."""
    s = np.asarray(scores, dtype=np.float64)
    order = decisions.selection_order(s, doc_ids)
    return order, np.asarray(doc_ids, dtype=object), _gaps(s, order)


@dataclass(frozen=True)
class Selected:
    """The top response by (-score, response id ascending)."""

    name: ClassVar[str] = "selected"
    per_doc: ClassVar[bool] = False
    kappa: ClassVar[int] = 2

    def decide(self, scores: np.ndarray, positions: np.ndarray, doc_ids: Sequence[str]) -> Decided:
        order, ids, g = _response_order(scores, doc_ids)
        margins = g[:, 0] if g.shape[1] else np.full(order.shape[0], np.inf)
        return Decided(ids[order[:, 0]].astype(object), margins, [row[:1] for row in order])


@dataclass(frozen=True)
class Pair:
    """The preference pair (top, bottom) of the order (-score, response id ascending)."""

    name: ClassVar[str] = "pair"
    per_doc: ClassVar[bool] = False
    kappa: ClassVar[int] = 2

    def decide(self, scores: np.ndarray, positions: np.ndarray, doc_ids: Sequence[str]) -> Decided:
        order, ids, g = _response_order(scores, doc_ids)
        values = np.array([f"{ids[row[0]]} > {ids[row[-1]]}" for row in order], dtype=object)
        margins = np.minimum(g[:, 0], g[:, -1]) if g.shape[1] else np.full(order.shape[0], np.inf)
        return Decided(values, margins, [row[[0, -1]] for row in order])


def additive_fit(scores: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """(M, n) least-squares fit score ~ doc effect + slot effect of one query's shuffles.

    The model of the variance shares (presdep.metrics.position): one-hot document and slot
    columns; the design is rank deficient by one, which leaves the fitted values unique.
    """
    s = np.asarray(scores, dtype=np.float64)
    m, n = s.shape
    doc = np.tile(np.arange(n), m)
    _, slot = np.unique(np.asarray(slots).ravel(), return_inverse=True)
    x = np.zeros((m * n, n + int(slot.max()) + 1))
    x[np.arange(m * n), doc] = 1.0
    x[np.arange(m * n), n + slot] = 1.0
    coef, *_ = np.linalg.lstsq(x, s.ravel(), rcond=None)
    return (x @ coef).reshape(m, n)


__all__ = ["Decided", "Matched", "Pair", "ReaderInput", "Retained", "Selected", "additive_fit"]
