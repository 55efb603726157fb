"""One query's presentations, the prompts they take and the rows their readouts give.

:func:`plan_query` lays a query out (every presentation of ``protocol.perturbations``, each
cut into prompts by the variant's chunking) before anything is read, so a job can read many
queries' prompts in one scorer call; :func:`finish_query` turns a query's readouts back into
its ``scores`` rows, adding the noise re-reads of the first-stage presentation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from presdep.config.records import Protocol, Variant
from presdep.contracts.presentations import (
    NoRelevantDocument,
    chunk_positions,
    middle_injection,
    shuffle_order,
    stable_seed,
    within_chunk,
)
from presdep.contracts.schemas import SCHEMAS
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import BATCH_NOISE
from presdep.scoring.template import prepare_doc

_SCORE_COLS = SCHEMAS["scores"].names


def shuffle_count(v: Variant, p: Protocol) -> int:
    """Random shuffles scored per query: M, or E*K for a BSC variant (its views need them all)."""
    return p.M if v.bsc_k == 1 else v.bsc_ensembles * v.bsc_k


def orders_for_query(
    qid: str, n: int, grades: Mapping[str, int] | None, doc_ids: Sequence[str],
    dataset: str, v: Variant, p: Protocol, shuffled: bool = True,
) -> list[tuple[str, int, list[int], str]]:
    """Every presentation of one query: (perturbation, presentation, order as indices into
    first-stage order, chunking). Every pass is cut by the variant's chunking: the
    round-robin row deals the first-stage order and each shuffle round-robin
    (docs/methods/variants.md). ``shuffled`` False: the query is not on the dataset's shuffle list, so it gets
    the first-stage pass and no random shuffles."""
    base = list(range(n))
    seed, b = p.seed, p.B
    out: list[tuple[str, int, list[int], str]] = [(FIRST_STAGE, 0, base, v.chunking)]
    for pert in p.perturbations:
        if pert == "random_shuffle":
            if not shuffled:
                continue
            for m in range(shuffle_count(v, p)):
                order = shuffle_order(n, m, p.shuffle_rule, base_seed=seed, dataset=dataset, query_id=qid, b=b,
                                      chunking=v.chunking)
                out.append((pert, m, order, v.chunking))
        elif pert == "within_chunk":
            for m in range(p.M):
                s = stable_seed(seed, dataset, qid, "within_chunk", m)
                out.append((pert, m, within_chunk(base, b, s, v.chunking), v.chunking))
        elif pert == "middle_injection":
            if grades is None:
                continue
            try:
                injected = middle_injection(list(doc_ids), grades)  # ties by doc id, not index
            except NoRelevantDocument:
                continue
            index = {d: i for i, d in enumerate(doc_ids)}
            for m, order in enumerate(injected):
                out.append((pert, m, [index[d] for d in order], v.chunking))
    return out


@dataclass
class QueryPlan:
    """One query's presentations and the prompts they take, before any read."""

    qid: str
    query: str
    doc_ids: list[str]
    docs: list[str]
    ranks: list[int]
    orders: list[tuple[str, int, list[int], str]]
    # Every prompt of every presentation: (presentation index, prompt, positions, doc indices).
    layout: list[tuple[int, int, list[int], list[int]]]

    @property
    def prompts(self) -> list[tuple[str, list[str]]]:
        return [(self.query, [self.docs[i] for i in idx]) for *_, idx in self.layout]


def plan_query(qid: str, group: pl.DataFrame, grades: Mapping[str, int] | None, dataset: str, v: Variant,
               p: Protocol, shuffled: bool = True) -> QueryPlan:
    group = group.sort("first_stage_rank")
    doc_ids = group["doc_id"].to_list()
    n = len(doc_ids)
    orders = orders_for_query(qid, n, grades, doc_ids, dataset, v, p, shuffled)
    layout = [(ui, j, pos, [order[x] for x in pos])
              for ui, (_, _, order, chunking) in enumerate(orders)
              for j, pos in enumerate(chunk_positions(n, p.B, chunking))]
    return QueryPlan(qid, group["query"][0], doc_ids, [prepare_doc(t, p.max_doc_chars) for t in group["doc"].to_list()],
                     group["first_stage_rank"].to_list(), orders, layout)


def score_query(
    qid: str, group: pl.DataFrame, grades: Mapping[str, int] | None,
    dataset: str, v: Variant, p: Protocol, scorer: Any, shuffled: bool = True,
) -> pl.DataFrame:
    """One query's rows: one single-pass readout per document per presentation."""
    plan = plan_query(qid, group, grades, dataset, v, p, shuffled)
    if getattr(scorer, "first_stage", False):
        n = len(plan.doc_ids)
        readouts = [scorer.score_ranked([plan.ranks[i] for i in idx], n) for *_, idx in plan.layout]
    else:
        readouts = scorer.score_prompts(plan.prompts)
    return finish_query(plan, readouts, p, scorer, shuffled)


def finish_query(plan: QueryPlan, readouts: Sequence[Any], p: Protocol, scorer: Any, shuffled: bool) -> pl.DataFrame:
    """A query's rows from the readouts of its prompts (in ``plan.layout`` order), its noise
    re-reads added where the job measures them."""
    qid, doc_ids, n = plan.qid, plan.doc_ids, len(plan.doc_ids)
    orders, layout = plan.orders, plan.layout
    if len(readouts) != len(layout):
        raise RuntimeError(f"scorer {scorer.name} returned {len(readouts)} prompts for {len(layout)}")
    if shuffled and measures_noise(scorer, p):
        orders, layout, readouts = _with_noise_rereads(qid, plan.query, plan.docs, orders, layout, readouts, p, scorer)

    n_units = len(orders)
    score = np.full((n_units, n), np.nan)
    probs = np.full((n_units, n, 4), np.nan)
    where = np.full((n_units, 3, n), -1, dtype=np.int64)  # position, prompt, slot
    has_probs = True
    for (ui, j, pos, idx), ro in zip(layout, readouts):
        if len(ro) != len(idx):
            raise RuntimeError(f"scorer {scorer.name} returned {len(ro)} readouts for {len(idx)} documents")
        if all(r.probs is not None for r in ro):
            probs[ui, idx] = np.asarray([r.probs for r in ro], dtype=np.float64)
        else:
            has_probs = False
        score[ui, idx] = [r.score for r in ro]
        for s, (d, x) in enumerate(zip(idx, pos)):
            where[ui, :, d] = (x, j, s)

    frames = []
    for ui, (pert, m, _, _) in enumerate(orders):
        cols: dict[str, Any] = {
            "query_id": [qid] * n,
            "doc_id": doc_ids,
            "perturbation": [pert] * n,
            "presentation": np.full(n, m, dtype=np.int32),
            "position": where[ui, 0].astype(np.int32),
            "prompt": where[ui, 1].astype(np.int32),
            "slot": where[ui, 2].astype(np.int32),
            "score": score[ui].astype(np.float64),
        }
        for g in range(4):
            cols[f"p{g}"] = (probs[ui, :, g].astype(np.float32) if has_probs
                             else pl.Series(f"p{g}", [None] * n, dtype=pl.Float32))
        frames.append(pl.DataFrame(cols))
    out = pl.concat(frames).select(_SCORE_COLS)
    if (out["position"] < 0).any() or out["score"].is_nan().any():
        raise RuntimeError(f"query {qid!r}: a document was not scored in some presentation")
    return out


def measures_noise(scorer: Any, p: Protocol) -> bool:
    """Whether this job re-reads the first-stage presentation (protocol.noise_rereads >= 2 and a
    scorer that batches prompts; the identity scorer and generative backends have no batch noise to read)."""
    return p.noise_rereads >= 2 and hasattr(scorer, "reread_in_batches")


def _with_noise_rereads(qid: str, query: str, docs: Sequence[str], orders: list, layout: list, readouts: list,
                        p: Protocol, scorer: Any) -> tuple[list, list, list]:
    """``orders``, ``layout`` and ``readouts`` extended by R re-reads of the first-stage presentation
    (perturbation batch_noise, presentations 0..R-1), each in other batch companions drawn from
    the query's own prompts (docs/methods/tau-psi.md#the-noise-floor-tau_psi_noise)."""
    targets = [entry for entry in layout if entry[0] == 0]  # the first-stage pass's prompts
    prompt = [(query, [docs[i] for i in idx]) for *_, idx in layout]
    target_prompts = [prompt[k] for k, entry in enumerate(layout) if entry[0] == 0]
    companions = [prompt[k] for k, entry in enumerate(layout) if entry[0] != 0]
    rereads = scorer.reread_in_batches(target_prompts, companions, p.noise_rereads,
                                       seed=stable_seed(p.seed, "batch_noise", qid))
    orders = list(orders)
    layout = list(layout)
    readouts = list(readouts)
    first = orders[0]
    for r, reads in enumerate(rereads):
        ui = len(orders)
        orders.append((BATCH_NOISE, r, first[2], first[3]))
        for (_, j, pos, idx), ro in zip(targets, reads):
            layout.append((ui, j, pos, idx))
            readouts.append(ro)
    return orders, layout, readouts


__all__ = ["QueryPlan", "finish_query", "measures_noise", "orders_for_query", "plan_query", "score_query", "shuffle_count"]
