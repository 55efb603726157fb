"""Score the render perturbations of every sampled query (docs/methods/render-perturbations.md).

The order stays the first-stage order, cut into prompts at B by the variant's chunking exactly as
a score job cuts its first-stage pass; only the prompt's surface changes
(:mod:`presdep.contracts.render_variants`). Variant 0 of every kind is that first-stage prompt
itself (read once, a read-cache hit where the score job has read it). The rows follow the
``scores`` contract, so the metrics of a score file apply unchanged: perturbation ``first_stage``
(presentation 0, the canonical prompt) and one perturbation per kind, its presentations the
variants 0..4 at their fixed positions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from presdep.contracts.errors import InvalidInput
from presdep.contracts.pool_presentations import sample_queries
from presdep.contracts.presentations import chunk_positions
from presdep.contracts.readouts import SlotRequest
from presdep.contracts.render_variants import VARIANTS, check_kinds, render_of
from presdep.contracts.schemas import SCHEMAS
from presdep.contracts.tasks import FIRST_STAGE
from presdep.scoring.pool_run import check_candidates
from presdep.scoring.score_progress import read_with_progress
from presdep.scoring.template import prepare_doc

log = logging.getLogger(__name__)

_COLUMNS = SCHEMAS["scores"].names


class _Query:
    """One query's requests (distinct, in first-use order) and its rows' layout."""

    def __init__(self, qid: str, group: pl.DataFrame):
        self.qid = qid
        self.query = str(group["query"][0])
        self.doc_ids = [str(d) for d in group["doc_id"].to_list()]
        self.requests: list[SlotRequest] = []
        self._index: dict[SlotRequest, int] = {}
        # (perturbation, presentation, prompt, positions, request index)
        self.prompts: list[tuple[str, int, int, list[int], int]] = []

    def ask(self, request: SlotRequest) -> int:
        if request not in self._index:
            self._index[request] = len(self.requests)
            self.requests.append(request)
        return self._index[request]


def _plan(q: _Query, texts: list[str], kinds: Sequence[str], *, b: int, chunking: str, seed: int,
          rubric: str) -> None:
    for p, positions in enumerate(chunk_positions(len(texts), b, chunking)):
        docs = tuple(texts[i] for i in positions)
        canonical = q.ask(SlotRequest.ordinary(q.query, docs))
        q.prompts.append((FIRST_STAGE, 0, p, positions, canonical))
        for kind in kinds:
            for v in range(VARIANTS):
                render = render_of(kind, v, len(docs), seed=seed, rubric=rubric)
                q.prompts.append((kind, v, p, positions, q.ask(SlotRequest.ordinary(q.query, docs, render))))


def _read(scorer: Any, q: _Query) -> list[list[Any]]:
    readouts = scorer.score_slots(q.requests)
    if len(readouts) != len(q.requests):
        raise RuntimeError(f"scorer {getattr(scorer, 'name', '?')} returned {len(readouts)} requests for "
                           f"{len(q.requests)} (query {q.qid!r})")
    for r, ro in zip(q.requests, readouts):
        if len(ro) != len(r.read):
            raise RuntimeError(f"scorer {getattr(scorer, 'name', '?')} returned {len(ro)} readouts for "
                               f"{len(r.read)} lines read (query {q.qid!r})")
    return readouts


def _rows(q: _Query, readouts: list[list[Any]]) -> dict[str, list]:
    cols: dict[str, list] = {name: [] for name in _COLUMNS}
    for pert, presentation, prompt, positions, k in q.prompts:
        for slot, (pos, ro) in enumerate(zip(positions, readouts[k], strict=True)):
            probs = ro.probs if ro.probs is not None and len(ro.probs) == 4 else (None,) * 4
            for name, value in zip(_COLUMNS, (q.qid, q.doc_ids[pos], pert, presentation, pos, prompt, slot,
                                              float(ro.score), *probs)):
                cols[name].append(value)
    return cols


def score_renders(candidates: pl.DataFrame, scorer: Any, *, b: int, chunking: str, kinds: Sequence[str],
                  seed: int = 0, query_sample_seed: int = 0, queries: int | None = None, rubric: str = "relevance_v2",
                  max_doc_chars: int | None = None, progress: bool = False) -> pl.DataFrame:
    """The ``scores`` rows of the render perturbations ``kinds`` on the sampled queries.

    Every query with candidates is eligible; ``queries`` (None: all) of them are read, the first
    in stable-seed order (``query_sample_seed``, as the pool perturbation samples). ``seed`` draws
    the random labels and each variant's one label permutation; ``rubric`` is the dataset's rubric (its
    paraphrases and scales are shipped beside it); ``max_doc_chars`` cuts every document as the
    score job does (same prompts, same cache keys).
    """
    unknown = check_kinds(kinds)
    if unknown or not kinds:
        raise InvalidInput(f"render perturbations: unknown or no kinds {unknown or list(kinds)}")
    if not hasattr(scorer, "score_slots") or getattr(scorer, "first_stage", False):
        raise InvalidInput(f"scorer {getattr(scorer, 'name', '?')!r} cannot read a prompt's render "
                           "(capability slot_reads)")
    check_candidates(candidates)
    groups = {str(qid): g.sort("first_stage_rank")
              for (qid,), g in candidates.group_by("query_id", maintain_order=True)}
    sampled = sample_queries(list(groups), query_sample_seed, queries or len(groups))
    plans = []
    for qid in sampled:
        q = _Query(qid, groups[qid])
        _plan(q, [prepare_doc(t, max_doc_chars) for t in groups[qid]["doc"].to_list()], kinds, b=b,
              chunking=chunking, seed=seed, rubric=rubric)
        plans.append(q)
    total = sum(len(q.requests) for q in plans)
    log.info("render perturbations %s: %d queries, %d distinct requests", list(kinds), len(plans), total)
    # One scorer call per query: its requests batch together, and no query's token ids wait in memory.
    readouts = read_with_progress(scorer, total, "score renders", lambda: [_read(scorer, q) for q in plans], progress)
    parts = [pl.from_arrow(pa.table(_rows(q, ro), schema=SCHEMAS["scores"])) for q, ro in zip(plans, readouts)]
    out = pl.concat(parts)
    if out["score"].is_nan().any():
        raise RuntimeError("render perturbations: the scorer returned a NaN score")
    return out


__all__ = ["score_renders"]
