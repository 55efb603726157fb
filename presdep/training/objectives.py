"""The five training objectives: squared error between the student's E[g] and a silver label.

A training unit is a :class:`TrainChunk`: B candidates of one query in first-stage
order (the contiguous first-stage chunks), each with two silver labels (the
single-order label, read under the first-stage presentation, and the mean over
the teacher's T shuffles). An objective decides which *views* (orders of the
chunk's documents inside one prompt) the student sees at a step and turns the
student's scores on those views into a loss.

| objective        | label        | views per step                          | extra                                   |
|------------------|--------------|-----------------------------------------|-----------------------------------------|
| single_order     | single-order | first-stage order                       |                                         |
| order_averaged   | mean over T  | first-stage order                       |                                         |
| perm_aug         | single-order | ``n_views`` random in-chunk orders      |                                         |
| debias_first     | single-order | one random in-chunk order               | per-slot inverse-propensity weights     |
| oc_sft           | single-order | two random in-chunk orders A, B         | + lambda_t * mean_d (s_A(d) - s_B(d))^2 |

All errors are keyed by doc id (a view's scores are mapped back to the chunk's
documents before comparing). The supervised term is the mean over (chunk, doc)
pairs that carry a label, averaged over views; with several views this is
``mean_v mean_d (s_v(d) - y(d))^2``. OC-SFT at lambda = 0 is therefore exactly
``perm_aug`` with ``n_views = 2`` over the same views, and DebiasFirst with
uniform weights is exactly ``perm_aug`` with one view.

View v of chunk c at epoch e is a Fisher-Yates shuffle seeded by
``stable_seed(seed, "view", e, query_id, chunk_id, v)``: the same on every
machine, process and execution order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from presdep.presentations import chunk_positions, random_shuffle, stable_seed

OBJECTIVES = ("single_order", "order_averaged", "perm_aug", "debias_first", "oc_sft")
DEBIAS_EPS = 1e-3


@dataclass(frozen=True)
class TrainChunk:
    query_id: str
    query: str
    chunk_id: int
    doc_ids: tuple[str, ...]  # first-stage order
    docs: tuple[str, ...]
    label_single: tuple[float | None, ...]
    label_mean: tuple[float | None, ...]

    def __len__(self) -> int:
        return len(self.doc_ids)


def build_chunks(
    candidates: Sequence[Mapping],
    labels_single: Mapping[tuple[str, str], float | None],
    labels_mean: Mapping[tuple[str, str], float | None],
    B: int,
) -> list[TrainChunk]:
    """Cut each query's first-stage list into contiguous chunks of B with their labels.

    ``candidates`` are rows with query_id, query, doc_id, doc, first_stage_rank.
    Queries come in order of first appearance; a document without any label is
    kept (it shapes the prompt) but contributes no supervised error.
    """
    by_q: dict[str, list[Mapping]] = {}
    for row in candidates:
        by_q.setdefault(str(row["query_id"]), []).append(row)
    out: list[TrainChunk] = []
    for qid, rows in by_q.items():
        rows = sorted(rows, key=lambda r: int(r["first_stage_rank"]))
        for j, pos in enumerate(chunk_positions(len(rows), B, "contiguous")):
            part = [rows[i] for i in pos]
            ids = tuple(str(r["doc_id"]) for r in part)
            out.append(
                TrainChunk(
                    query_id=qid,
                    query=str(part[0]["query"]),
                    chunk_id=j,
                    doc_ids=ids,
                    docs=tuple(str(r["doc"]) for r in part),
                    label_single=tuple(labels_single.get((qid, d)) for d in ids),
                    label_mean=tuple(labels_mean.get((qid, d)) for d in ids),
                )
            )
    return out


def view_order(seed: int, epoch: int, query_id: str, chunk_id: int, view: int, n: int) -> list[int]:
    """Indices into the chunk's first-stage order, in presented (slot) order."""
    return random_shuffle(list(range(n)), stable_seed(int(seed), "view", int(epoch), str(query_id), int(chunk_id), int(view)))


def slot_propensity_weights(relevant: Sequence[Sequence[bool]], B: int, eps: float = DEBIAS_EPS) -> np.ndarray:
    """DebiasFirst's per-slot weights from the first-stage chunks' relevance flags.

    ``relevant[c][s]`` is True when the document at slot s of first-stage chunk c
    has qrels >= 1. p[s] = (relevant documents at slot s) / (documents at slot s),
    smoothed as p[s] + eps; w[s] = 1 / p[s], normalised to mean 1 over the B slots
    (slots that never occur keep p = eps).
    """
    rel = np.zeros(B)
    cnt = np.zeros(B)
    for flags in relevant:
        if len(flags) > B:
            raise ValueError(f"a chunk has {len(flags)} documents, more than B = {B}")
        for s, f in enumerate(flags):
            cnt[s] += 1
            rel[s] += bool(f)
    p = np.divide(rel, cnt, out=np.zeros(B), where=cnt > 0) + eps
    w = 1.0 / p
    return w / w.mean()


def lambda_at(step: int, lam: float, warmup_steps: int) -> float:
    """lambda warmed up linearly from 0 at step 0 to ``lam`` at ``warmup_steps``."""
    if warmup_steps <= 0:
        return float(lam)
    return float(lam) * min(1.0, step / warmup_steps)


class Objective:
    """Views per step and the loss on the student's scores of those views."""

    name = "base"
    label = "single"  # which silver label: single | mean
    n_views = 1
    random_views = False

    def views(self, chunk: TrainChunk, epoch: int, seed: int) -> list[list[int]]:
        n = len(chunk)
        if not self.random_views:
            return [list(range(n))] * self.n_views
        return [view_order(seed, epoch, chunk.query_id, chunk.chunk_id, v, n) for v in range(self.n_views)]

    def labels(self, chunk: TrainChunk) -> tuple[torch.Tensor, torch.Tensor]:
        """(label per doc in first-stage order, mask of docs that carry one)."""
        raw = chunk.label_single if self.label == "single" else chunk.label_mean
        mask = torch.tensor([x is not None and not math.isnan(x) for x in raw], dtype=torch.bool)
        y = torch.tensor([float(x) if m else 0.0 for x, m in zip(raw, mask.tolist())], dtype=torch.float32)
        return y, mask

    def slot_weights(self, n: int) -> torch.Tensor | None:
        return None

    def loss(
        self,
        batch: Sequence[TrainChunk],
        views: Sequence[Sequence[Sequence[int]]],
        scores: Sequence[Sequence[torch.Tensor]],
        step: int,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``scores[c][v][s]`` is the student's E[g] of doc ``views[c][v][s]`` at slot s."""
        n_views = len(views[0])
        sup_sum = None
        n_labelled = 0
        by_doc: list[list[torch.Tensor]] = []  # per chunk, per view: scores in first-stage order
        for chunk, cviews, cscores in zip(batch, views, scores):
            y, mask = self.labels(chunk)
            y, mask = y.to(cscores[0].device), mask.to(cscores[0].device)
            n_labelled += int(mask.sum())
            per_view = []
            for order, s in zip(cviews, cscores):
                order_t = torch.as_tensor(order, device=s.device)
                s_doc = torch.empty_like(s).scatter(0, order_t, s)  # s_doc[order[slot]] = s[slot]
                per_view.append(s_doc)
                err = (s_doc - y) ** 2
                w = self.slot_weights(len(order))
                if w is not None:
                    slot_of_doc = torch.empty_like(order_t).scatter(0, order_t, torch.arange(len(order), device=s.device))
                    err = err * w.to(s.device)[slot_of_doc]
                term = err[mask].sum()
                sup_sum = term if sup_sum is None else sup_sum + term
            by_doc.append(per_view)
        sup = sup_sum / max(n_labelled, 1) / n_views
        total, parts = self.extra(sup, by_doc, step)
        parts["supervised"] = float(sup.detach())
        parts["loss"] = float(total.detach())
        return total, parts

    def extra(self, sup: torch.Tensor, by_doc: list[list[torch.Tensor]], step: int) -> tuple[torch.Tensor, dict]:
        return sup, {}

    def describe(self) -> dict:
        return {"objective": self.name, "label": self.label, "n_views": self.n_views, "random_views": self.random_views}


class SingleOrder(Objective):
    name = "single_order"


class OrderAveraged(Objective):
    name = "order_averaged"
    label = "mean"


class PermAug(Objective):
    name = "perm_aug"
    random_views = True

    def __init__(self, n_views: int = 1):
        if n_views < 1:
            raise ValueError("perm_aug needs n_views >= 1")
        self.n_views = int(n_views)


class DebiasFirst(Objective):
    name = "debias_first"
    random_views = True

    def __init__(self, weights: Sequence[float]):
        w = torch.as_tensor(np.asarray(weights, dtype=np.float32))
        if w.ndim != 1 or not torch.isfinite(w).all() or (w <= 0).any():
            raise ValueError(f"DebiasFirst needs positive finite per-slot weights, got {list(weights)}")
        self.weights = w

    def slot_weights(self, n: int) -> torch.Tensor:
        if n > len(self.weights):
            raise ValueError(f"a view has {n} slots but only {len(self.weights)} slot weights")
        return self.weights[:n]

    def describe(self) -> dict:
        return {**super().describe(), "slot_weights": [round(float(x), 6) for x in self.weights]}


class OCSFT(Objective):
    name = "oc_sft"
    random_views = True
    n_views = 2

    def __init__(self, lam: float, warmup_steps: int = 0):
        if lam < 0:
            raise ValueError(f"OC-SFT lambda must be >= 0, got {lam}")
        self.lam = float(lam)
        self.warmup_steps = int(warmup_steps)

    def extra(self, sup, by_doc, step):
        lam_t = lambda_at(step, self.lam, self.warmup_steps)
        sq = None
        n_docs = 0
        for a, b in by_doc:
            term = ((a - b) ** 2).sum()
            sq = term if sq is None else sq + term
            n_docs += a.numel()
        cons = sq / max(n_docs, 1)
        # lambda_t = 0 leaves the graph of the supervised term alone (bitwise perm_aug).
        total = sup + lam_t * cons if lam_t > 0 else sup
        return total, {"consistency": float(cons.detach()), "lambda": lam_t}

    def describe(self) -> dict:
        return {**super().describe(), "lambda": self.lam, "warmup_steps": self.warmup_steps}


def make_objective(spec: Mapping, slot_weights: Sequence[float] | None = None) -> Objective:
    """An objective from a student config (``objective``, ``lambda``, ``lambda_warmup_steps``, ``n_views``)."""
    name = spec.get("objective")
    if name == "single_order":
        return SingleOrder()
    if name == "order_averaged":
        return OrderAveraged()
    if name == "perm_aug":
        return PermAug(int(spec.get("n_views", 1)))
    if name == "debias_first":
        if slot_weights is None:
            raise ValueError("debias_first needs slot weights (from the training qrels)")
        return DebiasFirst(slot_weights)
    if name == "oc_sft":
        return OCSFT(float(spec.get("lambda", 0.0)), int(spec.get("lambda_warmup_steps", 0)))
    raise ValueError(f"unknown objective {name!r}; expected one of {OBJECTIVES}")


__all__ = [
    "OBJECTIVES", "TrainChunk", "build_chunks", "view_order", "slot_propensity_weights", "lambda_at",
    "Objective", "SingleOrder", "OrderAveraged", "PermAug", "DebiasFirst", "OCSFT", "make_objective",
]
