"""Score the context decomposition's arms for the sampled queries of one dataset
(docs/methods/context-decomposition.md).

Per query, every pool document is read in four arms (two in screen mode):

* A1: the document alone, an ordinary one-document prompt (scored once: no presentation);
* A2: the ordinary chunked read of each presentation (one prompt per chunk, every line read);
* A3: the target's real chunk with every companion replaced by a donor of about its length,
  read at the target's line only;
* A4: the target alone under its label ``[slot + 1]`` with the chunk's w-line skeleton, read
  at its line (at slot 0 the same prompt as A1 up to the line read).

A query's requests go to the scorer's ``score_slots`` in one call (repeats removed first), so a
scorer that batches and the read cache see them together; A1 and A2 are ordinary prompts,
so a score job's reads of the same prompts are cache hits.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from presdep.contracts.context_presentations import (
    CANONICAL,
    DonorPool,
    contexts,
    donations,
    presentation_orders,
)
from presdep.contracts.errors import InvalidInput
from presdep.contracts.pool_presentations import sample_queries
from presdep.contracts.readouts import SlotRequest
from presdep.scoring.pool_run import check_candidates
from presdep.scoring.score_progress import read_with_progress
from presdep.scoring.template import prepare_doc

log = logging.getLogger(__name__)

ARMS = ("A1", "A2", "A3", "A4")
SCREEN_ARMS = ("A1", "A4")
MODES = {"full": ARMS, "screen": SCREEN_ARMS}
CONTEXT_SCORE_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "arm": pl.String, "presentation": pl.Int32,
                        "position": pl.Int32, "slot": pl.Int32, "width": pl.Int32, "first_stage_rank": pl.Int32,
                        "score": pl.Float64}


class ContextScores(NamedTuple):
    """The scored rows (``CONTEXT_SCORE_SCHEMA``) and the donors' length errors (A3; characters)."""

    scores: pl.DataFrame
    length_errors: np.ndarray


@dataclass(frozen=True)
class _Query:
    qid: str
    query: str
    doc_ids: list[str]  # the pool, first-stage order
    texts: list[str]  # prepared as the prompt shows them
    ranks: list[int]


@dataclass
class _Plan:
    """Requests (deduplicated) and, per output row, which request and line answers it."""

    requests: dict[SlotRequest, int]
    rows: list[tuple[str, str, str, int, int, int, int, int, int, int]]  # ..., request index, readout index
    length_errors: list[int]

    def ask(self, request: SlotRequest) -> int:
        return self.requests.setdefault(request, len(self.requests))


def _queries(candidates: pl.DataFrame, judged: dict[str, set[str]], pool: int, queries: int, seed: int,
             max_doc_chars: int | None) -> tuple[list[_Query], dict[str, str]]:
    """The sampled queries' pools, and every candidate document's prepared text by id (the donors)."""
    groups = {str(q): g.sort("first_stage_rank") for (q,), g in candidates.group_by("query_id", maintain_order=True)}
    eligible = [q for q, g in groups.items() if q in judged and g.height >= 2]
    if not eligible:
        raise InvalidInput(f"context decomposition: no query has judgements and two candidates (of {len(groups)})")
    out = []
    for q in sample_queries(eligible, seed, queries):
        g = groups[q].head(pool)
        out.append(_Query(q, str(g["query"][0]), [str(d) for d in g["doc_id"]],
                          [prepare_doc(t, max_doc_chars) for t in g["doc"].to_list()],
                          [int(r) for r in g["first_stage_rank"]]))
    texts: dict[str, str] = {}
    for d, t in candidates.select("doc_id", "doc").iter_rows():
        texts.setdefault(str(d), prepare_doc(t, max_doc_chars))
    return out, texts


def _donor_pool(q: _Query, texts: dict[str, str], judged: set[str]) -> DonorPool:
    excluded = set(q.doc_ids) | judged
    return DonorPool({d: len(t) for d, t in texts.items() if d not in excluded})


def _plan_query(plan: _Plan, q: _Query, arms: tuple[str, ...], orders: dict[int, list[int]], b: int, chunking: str,
                texts: dict[str, str], donors: DonorPool | None) -> None:
    lengths = [len(t) for t in q.texts]
    for i, (doc, rank) in enumerate(zip(q.doc_ids, q.ranks)):
        if "A1" in arms:
            plan.rows.append((q.qid, doc, "A1", CANONICAL, i, 0, 1, rank,
                              plan.ask(SlotRequest.ordinary(q.query, (q.texts[i],))), 0))
    for presentation, order in orders.items():
        for c in contexts(order, presentation, b, chunking):
            doc, rank, w = q.doc_ids[c.target], q.ranks[c.target], c.width
            head = (q.qid, doc)
            if "A2" in arms:
                req = SlotRequest.ordinary(q.query, tuple(q.texts[m] for m in c.members))
                plan.rows.append((*head, "A2", presentation, c.position, c.slot, w, rank, plan.ask(req), c.slot))
            if "A3" in arms and donors is not None:
                shown = [q.texts[m] for m in c.members]
                for gift in donations(c, q.qid, q.doc_ids, lengths, donors):
                    shown[gift.slot] = texts[gift.donor]
                    plan.length_errors.append(gift.length_error)
                req = SlotRequest(q.query, tuple(shown), tuple(range(1, w + 1)), w, (c.slot + 1,))
                plan.rows.append((*head, "A3", presentation, c.position, c.slot, w, rank, plan.ask(req), 0))
            if "A4" in arms:
                req = SlotRequest(q.query, (q.texts[c.target],), (c.slot + 1,), w, (c.slot + 1,))
                plan.rows.append((*head, "A4", presentation, c.position, c.slot, w, rank, plan.ask(req), 0))


def _read(scorer: Any, plan: _Plan, n_candidates: dict[tuple[str, int], int]) -> list[float]:
    """The score of every planned row."""
    requests = list(plan.requests)
    if getattr(scorer, "first_stage", False):  # the identity scorer reads ranks: every arm alike
        return [float(n_candidates[(r[0], r[7])]) for r in plan.rows]
    if not hasattr(scorer, "score_slots"):
        raise InvalidInput(f"scorer {getattr(scorer, 'name', '?')!r} cannot read selected slots "
                           "(capability slot_reads); the context decomposition needs it")
    readouts = scorer.score_slots(requests)
    if len(readouts) != len(requests):
        raise RuntimeError(f"scorer {getattr(scorer, 'name', '?')} returned {len(readouts)} prompts for {len(requests)}")
    for req, ro in zip(requests, readouts):
        if len(ro) != len(req.read):
            raise RuntimeError(f"scorer {getattr(scorer, 'name', '?')} returned {len(ro)} readouts for a request "
                               f"reading {len(req.read)} lines")
    return [float(readouts[r[8]][r[9]].score) for r in plan.rows]


def score_contexts(candidates: pl.DataFrame, judged: Mapping[str, Collection[str]], scorer: Any, *, b: int,
                   chunking: str, mode: str = "full", pool: int = 100, shuffles: int = 10, queries: int = 100,
                   query_sample_seed: int = 0, max_doc_chars: int | None = None,
                   progress: bool = False) -> ContextScores:
    """One row per (query, pool document, arm, presentation) of the sampled queries.

    ``judged`` gives each query's judged documents (never donors). Queries with judgements and
    at least two candidates are eligible; the first ``queries`` in
    stable-seed order (``query_sample_seed``, as the pool perturbation samples) are read. The
    pool is a query's first ``pool`` candidates; presentations are the canonical order and
    ``Random(s).shuffle`` for s < ``shuffles``; ``max_doc_chars`` cuts every document (donors
    too) as a score job does.
    """
    if mode not in MODES:
        raise InvalidInput(f"context decomposition: unknown mode {mode!r}; expected one of {sorted(MODES)}")
    check_candidates(candidates)
    judged = {str(q): set(docs) for q, docs in judged.items()}
    sampled, texts = _queries(candidates, judged, pool, queries, query_sample_seed, max_doc_chars)
    arms = MODES[mode]
    plans = []
    for q in sampled:
        plans.append(_Plan({}, [], []))
        donors = _donor_pool(q, texts, judged.get(q.qid, set())) if "A3" in arms else None
        _plan_query(plans[-1], q, arms, presentation_orders(len(q.doc_ids), shuffles), b, chunking, texts, donors)
    n_candidates = {(q.qid, r): len(q.doc_ids) - r for q in sampled for r in q.ranks}
    total = sum(len(p.requests) for p in plans)
    log.info("context decomposition: %d queries, %d rows, %d distinct requests", len(sampled),
             sum(len(p.rows) for p in plans), total)
    # One scorer call per query: a query's ~2,400 requests (pool 100, 11 presentations) batch well,
    # and the token ids of every query's prompts at once would not fit in memory.
    scores = read_with_progress(scorer, total, "score contexts",
                                lambda: [x for p in plans for x in _read(scorer, p, n_candidates)],
                                progress and not getattr(scorer, "first_stage", False))
    cols = list(zip(*[r for p in plans for r in p.rows]))
    out = pl.DataFrame({name: list(col) for name, col in zip(list(CONTEXT_SCORE_SCHEMA)[:8], cols[:8])} |
                       {"score": scores}, schema=CONTEXT_SCORE_SCHEMA)
    if out["score"].is_nan().any():
        raise RuntimeError("context decomposition: the scorer returned a NaN score")
    return ContextScores(out, np.asarray([e for p in plans for e in p.length_errors], dtype=np.int64))


def length_error_summary(errors: np.ndarray) -> dict:
    """The donors' length errors (A3): companions replaced, mean, 95th percentile, exact share."""
    if errors.size == 0:
        return {"companions": 0, "mean": None, "p95": None, "exact_share": None}
    return {"companions": int(errors.size), "mean": float(errors.mean()), "p95": float(np.percentile(errors, 95)),
            "exact_share": float((errors == 0).mean())}


__all__ = ["ARMS", "CONTEXT_SCORE_SCHEMA", "ContextScores", "MODES", "SCREEN_ARMS", "length_error_summary",
           "score_contexts"]
