"""The five training objectives: squared error between the student's E[g] and a silver label.

The data of one training query is a :class:`QueryList`: its whole candidate list in
first-stage order with two silver labels per document, **k1** (the teacher's score
under shuffle 0) and **k10** (the mean over the teacher's T shuffles). An objective
turns the query lists into the *items* of an epoch; an item is one prompt's
documents seen in one or more *views* (orders in the prompt's slots), and the
objective turns the student's scores on those views into a loss.

| objective        | label | items of epoch e                                           | extra                                   |
|------------------|-------|------------------------------------------------------------|-----------------------------------------|
| single_order     | k1    | first-stage chunks of B                                    |                                         |
| order_averaged   | k10   | first-stage chunks of B                                    |                                         |
| perm_aug         | k1    | per view seed: the whole list reshuffled, re-chunked by B  |                                         |
| debias_first     | k1    | as perm_aug                                                | loss weight w[first-stage slot]         |
| oc_sft           | k1    | first-stage chunks, views A, B = in-chunk shuffles         | + lambda_t * mean_d (s_A(d) - s_B(d))^2 |

Loss: the squared errors of the supervised view (the only view, or OC-SFT's view A)
summed over the labelled slots of the batch and divided by their number; view B
enters only the consistency term (mean over the batch's documents). Errors are keyed
by document, so labels follow the documents whatever slot shows them.

View seeds: a training seed s with N views has view seeds N(s - base) + 0..N-1
(base 42 by default: seeds 42, 43, 44 get [0, 1], [2, 3], [4, 5]). A whole-list view of
epoch e is ``random_shuffle(list, stable_seed(view_seed, "list_view", e, query_id))``;
OC-SFT's in-chunk view is ``stable_seed(view_seed, "chunk_view", e, query_id, chunk)``.
Epoch 0 thus depends on the view seeds alone; later epochs draw fresh views from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import chunk_positions, random_shuffle, stable_seed

OBJECTIVES = ("single_order", "order_averaged", "perm_aug", "debias_first", "oc_sft")
LABEL_OF = {"single_order": "k1", "order_averaged": "k10", "perm_aug": "k1", "debias_first": "k1", "oc_sft": "k1"}
DEBIAS_EPS = 1e-3
VIEW_SEED_RULE = "view seeds of training seed s = N*(s - base) + i, i = 0..N-1"


@dataclass(frozen=True)
class QueryList:
    """One training query: its whole candidate list in first-stage order, with both labels."""

    query_id: str
    query: str
    doc_ids: tuple[str, ...]
    docs: tuple[str, ...]
    label_k1: tuple[float | None, ...]
    label_k10: tuple[float | None, ...]

    def __len__(self) -> int:
        return len(self.doc_ids)


@dataclass(frozen=True)
class TrainItem:
    """One training example: ``views[v]`` = indices into the query's first-stage list, in slot order."""

    query: int  # index into the list of QueryList
    views: tuple[tuple[int, ...], ...]


def build_queries(
    candidates: Sequence[Mapping],
    labels_k1: Mapping[tuple[str, str], float | None],
    labels_k10: Mapping[tuple[str, str], float | None],
) -> list[QueryList]:
    """Each query's candidates in first-stage order with their labels.

    ``candidates`` are rows with query_id, query, doc_id, doc, first_stage_rank.
    Queries come in order of first appearance; a document without a label is kept
    (it shapes the prompt) but contributes no supervised error.
    """
    by_q: dict[str, list[Mapping]] = {}
    for row in candidates:
        by_q.setdefault(str(row["query_id"]), []).append(row)
    out = []
    for qid, rows in by_q.items():
        rows = sorted(rows, key=lambda r: int(r["first_stage_rank"]))
        ids = tuple(str(r["doc_id"]) for r in rows)
        if len(set(ids)) != len(ids):
            raise InvalidInput(f"training candidates: query {qid!r} lists a document twice")
        out.append(QueryList(qid, str(rows[0]["query"]), ids, tuple(str(r["doc"]) for r in rows),
                             tuple(labels_k1.get((qid, d)) for d in ids), tuple(labels_k10.get((qid, d)) for d in ids)))
    return out


def view_seeds_for(seed: int, n_views: int, base: int = 42) -> list[int]:
    """The view seeds of a training seed: N*(seed - base) + 0..N-1 (distinct seeds never share one)."""
    if n_views < 1:
        raise InvalidInput(f"n_views must be >= 1, got {n_views}")
    if seed < base:
        raise InvalidInput(f"training seed {seed} is below view_seed_base {base}: its view seeds would be negative "
                         f"({VIEW_SEED_RULE}); use seeds >= {base} or set student.view_seed_base")
    return [n_views * (int(seed) - int(base)) + i for i in range(n_views)]


def list_view(view_seed: int, epoch: int, query_id: str, n: int) -> list[int]:
    """A whole-list view: the first-stage indices 0..n-1 in presented order."""
    return random_shuffle(list(range(n)), stable_seed(int(view_seed), "list_view", int(epoch), str(query_id)))


def chunk_view(view_seed: int, epoch: int, query_id: str, chunk: int, members: Sequence[int]) -> list[int]:
    """An in-chunk view: the chunk's members in presented order."""
    return random_shuffle(list(members), stable_seed(int(view_seed), "chunk_view", int(epoch), str(query_id), int(chunk)))


def first_stage_items(queries: Sequence[QueryList], B: int) -> list[TrainItem]:
    return [TrainItem(qi, (tuple(pos),)) for qi, q in enumerate(queries) for pos in chunk_positions(len(q), B, "contiguous")]


def slot_propensity_weights(relevant: Sequence[Sequence[bool]], B: int, eps: float = DEBIAS_EPS) -> np.ndarray:
    """DebiasFirst's per-slot weights from the first-stage chunks' relevance flags.

    ``relevant[c][s]`` is True when the document at slot s of first-stage chunk c has
    grade >= 1. p[s] = (relevant documents at slot s) / (all relevant documents) + eps;
    w = 1 / p, normalised to mean 1 over the B slots.
    """
    rel = np.zeros(B)
    for c, flags in enumerate(relevant):
        if len(flags) > B:
            raise InvalidInput(f"first-stage chunk {c} has {len(flags)} documents, more than B = {B}")
        for s, f in enumerate(flags):
            rel[s] += bool(f)
    if rel.sum() == 0:
        raise InvalidInput("debias_first: no relevant document (grade >= 1) in the training qrels' first-stage chunks")
    p = rel / rel.sum() + eps
    w = 1.0 / p
    return w / w.mean()


def lambda_at(step: int, lam: float, warmup_steps: int) -> float:
    """lambda warmed up linearly from 0 at (0-based) step 0 to ``lam`` at ``warmup_steps``."""
    if warmup_steps <= 0:
        return float(lam)
    return float(lam) * min(1.0, step / warmup_steps)


class Objective:
    """The items of an epoch and the loss on the student's scores of their views."""

    name = "base"

    def __init__(self, B: int, view_seeds: Sequence[int] = ()):
        if B < 1:
            raise InvalidInput(f"B must be >= 1, got {B}")
        self.B = int(B)
        self.view_seeds = [int(v) for v in view_seeds]

    @property
    def label(self) -> str:
        return LABEL_OF[self.name]

    def items(self, queries: Sequence[QueryList], epoch: int) -> list[TrainItem]:
        return first_stage_items(queries, self.B)

    def labels(self, q: QueryList) -> tuple[torch.Tensor, torch.Tensor]:
        """(label per document in first-stage order, mask of documents that carry one)."""
        raw = q.label_k1 if self.label == "k1" else q.label_k10
        mask = torch.tensor([x is not None and not math.isnan(x) for x in raw], dtype=torch.bool)
        y = torch.tensor([float(x) if m else 0.0 for x, m in zip(raw, mask.tolist())], dtype=torch.float32)
        return y, mask

    def doc_weights(self, q: QueryList) -> torch.Tensor | None:
        """Per document (first-stage order) weight of its supervised error; None = all 1."""
        return None

    def normalizers(self, queries: Sequence[QueryList], batch: Sequence[TrainItem]) -> dict[str, int]:
        """The step's denominators, from its items alone: labelled supervised slots, and the
        documents of the supervised views (OC-SFT's consistency mean). A micro-batch's loss divides
        by the whole step's, so the micro-batches' gradients add up to the unsplit step's."""
        labelled = 0
        for item in batch:
            _, mask = self.labels(queries[item.query])
            labelled += int(mask[torch.as_tensor(item.views[0])].sum())
        return {"labelled": labelled, "docs": sum(len(item.views[0]) for item in batch)}

    def loss(
        self,
        queries: Sequence[QueryList],
        batch: Sequence[TrainItem],
        scores: Sequence[Sequence[torch.Tensor]],
        step: int,
        norms: Mapping[str, int] | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``scores[i][v][s]`` is the student's E[g] of document ``batch[i].views[v][s]`` at slot s.

        ``norms``: the whole step's :meth:`normalizers` when ``batch`` is one micro-batch of it
        (default: this batch's own); every loss term is a sum over items divided by them.
        """
        norms = self.normalizers(queries, batch) if norms is None else norms
        sup_sum = None
        for item, iscores in zip(batch, scores):
            q = queries[item.query]
            y, mask = self.labels(q)
            s = iscores[0]
            idx = torch.as_tensor(item.views[0], device=s.device)
            err = (s - y.to(s.device)[idx]) ** 2
            w = self.doc_weights(q)
            if w is not None:
                err = err * w.to(s.device)[idx]
            m = mask.to(s.device)[idx]
            term = err[m].sum()
            sup_sum = term if sup_sum is None else sup_sum + term
        sup = sup_sum / max(int(norms["labelled"]), 1)
        total, parts = self.extra(sup, batch, scores, step, norms)
        parts["supervised"] = float(sup.detach())
        parts["loss"] = float(total.detach())
        return total, parts

    def extra(self, sup, batch, scores, step, norms) -> tuple[torch.Tensor, dict]:
        return sup, {}

    def describe(self) -> dict:
        return {"objective": self.name, "label": self.label, "B": self.B, "view_seeds": self.view_seeds}


class SingleOrder(Objective):
    name = "single_order"


class OrderAveraged(Objective):
    name = "order_averaged"


class PermAug(Objective):
    name = "perm_aug"

    def __init__(self, B: int, view_seeds: Sequence[int]):
        super().__init__(B, view_seeds)
        if not self.view_seeds:
            raise InvalidInput(f"{self.name} needs at least one view seed")

    def items(self, queries, epoch):
        out = []
        for v in self.view_seeds:
            for qi, q in enumerate(queries):
                order = list_view(v, epoch, q.query_id, len(q))
                out += [TrainItem(qi, (tuple(order[p] for p in pos),)) for pos in chunk_positions(len(q), self.B, "contiguous")]
        return out


class DebiasFirst(PermAug):
    name = "debias_first"

    def __init__(self, B: int, view_seeds: Sequence[int], weights: Sequence[float]):
        super().__init__(B, view_seeds)
        w = torch.as_tensor(np.asarray(weights, dtype=np.float64), dtype=torch.float32)
        if w.ndim != 1 or len(w) != self.B or not torch.isfinite(w).all() or (w <= 0).any():
            raise InvalidInput(f"DebiasFirst needs {self.B} positive finite slot weights, got {list(weights)}")
        self.weights = w

    def doc_weights(self, q):
        # A document's first-stage slot: its rank modulo B (contiguous first-stage chunks).
        return self.weights[torch.arange(len(q)) % self.B]

    def describe(self):
        return {**super().describe(), "slot_weights": [round(float(x), 6) for x in self.weights]}


class OCSFT(Objective):
    name = "oc_sft"

    def __init__(self, B: int, view_seeds: Sequence[int], lam: float, warmup_steps: int = 0):
        super().__init__(B, view_seeds)
        if len(self.view_seeds) != 2:
            raise InvalidInput(f"OC-SFT needs exactly 2 view seeds (views A and B), got {self.view_seeds}")
        if lam < 0:
            raise InvalidInput(f"OC-SFT lambda must be >= 0, got {lam}")
        self.lam = float(lam)
        self.warmup_steps = int(warmup_steps)

    def items(self, queries, epoch):
        out = []
        for qi, q in enumerate(queries):
            for j, pos in enumerate(chunk_positions(len(q), self.B, "contiguous")):
                a, b = (tuple(chunk_view(v, epoch, q.query_id, j, pos)) for v in self.view_seeds)
                out.append(TrainItem(qi, (a, b)))
        return out

    def extra(self, sup, batch, scores, step, norms):
        lam_t = lambda_at(step, self.lam, self.warmup_steps)
        sq = None
        for item, (sa, sb) in zip(batch, scores):
            # Key both views by document: position of each document in view B.
            pos_b = {d: k for k, d in enumerate(item.views[1])}
            perm = torch.as_tensor([pos_b[d] for d in item.views[0]], device=sb.device)
            term = ((sa - sb[perm]) ** 2).sum()
            sq = term if sq is None else sq + term
        cons = sq / max(int(norms["docs"]), 1)
        # lambda_t = 0 leaves the graph of the supervised term alone (bitwise single-view training).
        total = sup + lam_t * cons if lam_t > 0 else sup
        return total, {"consistency": float(cons.detach()), "lambda": lam_t}

    def describe(self):
        return {**super().describe(), "lambda": self.lam, "warmup_steps": self.warmup_steps}


def make_objective(
    name: str,
    *,
    B: int,
    view_seeds: Sequence[int] = (),
    lam: float = 0.0,
    lambda_warmup_steps: int = 0,
    slot_weights: Sequence[float] | None = None,
) -> Objective:
    """The objective ``name`` with its view seeds (and lambda, or DebiasFirst's slot weights)."""
    if name == "single_order":
        return SingleOrder(B, view_seeds)
    if name == "order_averaged":
        return OrderAveraged(B, view_seeds)
    if name == "perm_aug":
        return PermAug(B, view_seeds)
    if name == "debias_first":
        if slot_weights is None:
            raise InvalidInput("debias_first needs slot weights (from the training qrels)")
        return DebiasFirst(B, view_seeds, slot_weights)
    if name == "oc_sft":
        return OCSFT(B, view_seeds, lam, lambda_warmup_steps)
    raise InvalidInput(f"unknown objective {name!r}; expected one of {OBJECTIVES}")


__all__ = [
    "OBJECTIVES", "LABEL_OF", "VIEW_SEED_RULE", "QueryList", "TrainItem", "build_queries", "view_seeds_for",
    "list_view", "chunk_view", "first_stage_items", "slot_propensity_weights", "lambda_at", "Objective",
    "SingleOrder", "OrderAveraged", "PermAug", "DebiasFirst", "OCSFT", "make_objective",
]
