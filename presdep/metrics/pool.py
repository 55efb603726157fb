"""Pool-perturbation metrics: how much a ranking of the same documents moves when the pool
around them loses one member (``drop``) or has it swapped for the next candidate (``replace``).

Everything is read on the documents the canonical and the perturbed pool share (the pool
less the dropped document), each ranking by score descending with ties by first-stage rank
(:func:`presdep.metrics.quality.presented_order` on first-stage positions):

* ``pool_psi`` = clip((1 - tau) / 2) of the two rankings, tau from the Kendall implementation
  tau-PSI uses (:func:`presdep.metrics.instability.tau_psi`; strict rankings, so tau-a = tau-b);
* ``top{k}_changed`` = 1 where the two top-k sets differ, else 0;
* ``ndcg{k}_canonical`` / ``ndcg{k}_perturbed`` through pytrec_eval with the shared documents'
  grades only (an unjudged shared document has grade 0; the ideal DCG comes from them), and
  ``ndcg{k}_change`` (perturbed - canonical) and ``ndcg{k}_abs_change``; null for a query without qrels.

A scorer that reads each document alone (B = 1) scores every shared document the same in
every pool, so all of these are 0 by construction. The aggregate row of each metric
(query_id null) is the mean over queries; ``pool_replace_minus_drop`` / ``pool_psi`` is
the macro replace - drop difference (a ragged last prompt alone would move both alike).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.pool_presentations import PERTURBED_POOLS, POOLS
from presdep.metrics.instability import tau_psi_many
from presdep.metrics.quality import ndcg_runs, presented_order, presented_ranks, qrels_to_dict
from presdep.metrics.rows import MetricRows

PERTURBATION = {"replace": "pool_replace", "drop": "pool_drop"}
DIFFERENCE_PERTURBATION = "pool_replace_minus_drop"
POOL_PSI = "pool_psi"
DEFAULT_K = 10


def metric_names(k: int = DEFAULT_K) -> tuple[str, ...]:
    """The per-query metrics of each perturbation, in the order they are written."""
    return (POOL_PSI, f"top{k}_changed", f"ndcg{k}_canonical", f"ndcg{k}_perturbed", f"ndcg{k}_change",
            f"ndcg{k}_abs_change")


@dataclass(frozen=True)
class SharedPair:
    """One query's canonical and perturbed scores of the shared documents, in first-stage order."""

    query_id: str
    doc_ids: list[str]
    canonical: np.ndarray
    perturbed: np.ndarray

    def orders(self) -> np.ndarray:
        """(2, n) indices: each ranking by score descending, ties by first-stage rank."""
        positions = np.broadcast_to(np.arange(len(self.doc_ids)), (2, len(self.doc_ids)))
        return presented_order(np.stack([self.canonical, self.perturbed]), positions)

    def strict(self) -> np.ndarray:
        """(2, n) tie-free scores laid out along :meth:`orders`."""
        positions = np.broadcast_to(np.arange(len(self.doc_ids)), (2, len(self.doc_ids)))
        return presented_ranks(np.stack([self.canonical, self.perturbed]), positions)


def pool_psi(pair: SharedPair) -> float:
    return float(tau_psi_many([pair.strict()])[0])


def top_changed(pair: SharedPair, k: int = DEFAULT_K) -> float:
    order = pair.orders()[:, :k]
    return float(set(order[0].tolist()) != set(order[1].tolist()))


def _query_pools(rows: pl.DataFrame, qid: str) -> dict[str, dict[str, float]]:
    """{pool: {doc_id: score}} of one query, the canonical pool's documents in first-stage order."""
    out: dict[str, dict[str, float]] = {}
    for name in POOLS:
        part = rows.filter(pl.col("pool") == name).sort("position")
        if part.height == 0:
            raise InvalidInput(f"pool scores: query {qid!r} has no {name!r} rows")
        if part["doc_id"].is_duplicated().any():
            raise InvalidInput(f"pool scores: query {qid!r} lists a document twice in pool {name!r}")
        out[name] = dict(zip(part["doc_id"].to_list(), part["score"].to_list()))
    return out


def shared_pairs(pool_scores: pl.DataFrame, mode: str) -> list[SharedPair]:
    """Per query the canonical and the ``mode`` pool read on the documents both hold."""
    missing = {"query_id", "doc_id", "pool", "position", "score"} - set(pool_scores.columns)
    if missing:
        raise InvalidInput(f"pool scores lack column(s) {sorted(missing)}")
    if mode not in PERTURBED_POOLS:
        raise InvalidInput(f"unknown pool perturbation {mode!r}; expected one of {PERTURBED_POOLS}")
    out = []
    for (qid,), rows in pool_scores.group_by("query_id", maintain_order=True):
        pools = _query_pools(rows, str(qid))
        canonical, perturbed = pools["canonical"], pools[mode]
        shared = [d for d in canonical if d in perturbed]  # canonical order = first-stage order
        if len(shared) != len(canonical) - 1 or len(shared) < 2:
            raise InvalidInput(f"pool scores: query {qid!r} shares {len(shared)} of {len(canonical)} canonical "
                               f"documents with pool {mode!r}; the protocol removes exactly one")
        out.append(SharedPair(str(qid), shared, np.array([canonical[d] for d in shared], dtype=np.float64),
                              np.array([perturbed[d] for d in shared], dtype=np.float64)))
    return out


def _ndcg(pairs: Sequence[SharedPair], which: int, qrels: Mapping[str, Mapping[str, int]], k: int) -> list[float]:
    """nDCG@k of ranking ``which`` (0 canonical, 1 perturbed) with the shared documents' grades."""
    judged = {p.query_id: {d: int(qrels[p.query_id].get(d, 0)) for d in p.doc_ids}
              for p in pairs if p.query_id in qrels}
    runs = {p.query_id: dict(zip(p.doc_ids, p.strict()[which].tolist())) for p in pairs if p.query_id in judged}
    got = ndcg_runs(runs, judged, k) if runs else {}
    return [got.get(p.query_id, math.nan) for p in pairs]


def _mode_rows(rows: MetricRows, pairs: Sequence[SharedPair], mode: str, qrels: Mapping, k: int) -> list[float]:
    qids = [p.query_id for p in pairs]
    pert = PERTURBATION[mode]
    psi = tau_psi_many([p.strict() for p in pairs]).tolist()
    canonical, perturbed = np.array(_ndcg(pairs, 0, qrels, k)), np.array(_ndcg(pairs, 1, qrels, k))
    names = metric_names(k)
    values = (psi, [top_changed(p, k) for p in pairs], canonical, perturbed, perturbed - canonical,
              np.abs(perturbed - canonical))
    for name, vals in zip(names, values):
        rows.per_query(pert, name, qids, vals)
    return psi


def pool_metrics(pool_scores: pl.DataFrame, qrels: pl.DataFrame | Mapping[str, Mapping[str, int]], *, dataset: str,
                 variant: str, seed: int | None = None, task: str = "rerank", k: int = DEFAULT_K) -> pl.DataFrame:
    """The ``metrics`` contract's long rows of both perturbations (see the module doc for the names)."""
    qrels_d = qrels_to_dict(qrels) if isinstance(qrels, pl.DataFrame) else qrels
    rows = MetricRows()
    psi = {mode: _mode_rows(rows, shared_pairs(pool_scores, mode), mode, qrels_d, k) for mode in PERTURBED_POOLS}
    both = [(r, d) for r, d in zip(psi["replace"], psi["drop"]) if not (math.isnan(r) or math.isnan(d))]
    rows.add(DIFFERENCE_PERTURBATION, None, POOL_PSI,
             float(np.mean([r for r, _ in both]) - np.mean([d for _, d in both])) if both else None)
    return rows.frame(dataset=dataset, variant=variant, seed=seed, task=task)


__all__ = ["DIFFERENCE_PERTURBATION", "PERTURBATION", "POOL_PSI", "SharedPair", "metric_names", "pool_metrics",
           "pool_psi", "shared_pairs", "top_changed"]
