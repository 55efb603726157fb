"""Score the pool perturbation's three lists of every sampled query (order fixed, no shuffle).

Each list (canonical, replace, drop: :func:`presdep.contracts.pool_presentations.pool_lists`)
is cut into prompts at B by the variant's chunking, exactly as a score job cuts its
first-stage pass, and every prompt of every query goes to the scorer in ONE
``score_prompts`` call, so a scorer that batches by itself and the read cache see them as
they see a score job's prompts (a canonical prompt a score job has already read is a cache hit).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.pool_presentations import (
    POOL_SIZE,
    POOLS,
    default_depth,
    drop_rank,
    pool_lists,
    sample_queries,
)
from presdep.contracts.presentations import chunk
from presdep.scoring.run import CANDIDATE_COLUMNS
from presdep.scoring.score_progress import read_with_progress
from presdep.scoring.template import prepare_doc

log = logging.getLogger(__name__)

POOL_SCORE_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "pool": pl.String, "position": pl.Int32,
                     "score": pl.Float64, "drop_rank": pl.Int32}


class PoolScores(NamedTuple):
    """The scored rows (``POOL_SCORE_SCHEMA``) and how many queries had too few candidates."""

    scores: pl.DataFrame
    skipped: int


@dataclass(frozen=True)
class _Prompt:
    qid: str
    pool: str
    positions: list[int]  # in the pool's list
    candidates: list[int]  # indices into the query's first-stage order


def check_candidates(candidates: pl.DataFrame) -> None:
    missing = [c for c in CANDIDATE_COLUMNS if c not in candidates.columns]
    if missing:
        raise InvalidInput(f"candidates lack column(s) {missing}; have {candidates.columns}")
    if candidates.select("query_id", "doc_id").is_duplicated().any():
        raise InvalidInput("candidates: a (query_id, doc_id) pair appears twice")
    if candidates.select("query_id", "first_stage_rank").is_duplicated().any():
        raise InvalidInput("candidates: a query repeats a first_stage_rank")


def _layout(qid: str, group: pl.DataFrame, drop: int, b: int, chunking: str, pool: int,
            depth: int) -> list[_Prompt]:
    lists = pool_lists(list(range(group.height)), drop, pool=pool, depth=depth, query_id=qid)
    out = []
    for name in POOLS:
        order = lists[name]
        for positions in chunk(list(range(len(order))), b, chunking):
            out.append(_Prompt(qid, name, positions, [order[x] for x in positions]))
    return out


def _read(scorer: Any, prompts: list[_Prompt], groups: dict[str, pl.DataFrame],
          texts: dict[str, list[str]]) -> list[list[float]]:
    if getattr(scorer, "first_stage", False):  # the identity scorer reads ranks, not texts
        ranks = {q: g["first_stage_rank"].to_list() for q, g in groups.items()}
        readouts = [scorer.score_ranked([ranks[p.qid][i] for i in p.candidates], groups[p.qid].height)
                    for p in prompts]
    else:
        query = {q: g["query"][0] for q, g in groups.items()}
        readouts = scorer.score_prompts([(query[p.qid], [texts[p.qid][i] for i in p.candidates]) for p in prompts])
    if len(readouts) != len(prompts):
        raise RuntimeError(f"scorer {getattr(scorer, 'name', '?')} returned {len(readouts)} prompts for {len(prompts)}")
    out = []
    for p, ro in zip(prompts, readouts):
        if len(ro) != len(p.candidates):
            raise RuntimeError(f"scorer {getattr(scorer, 'name', '?')} returned {len(ro)} readouts for "
                               f"{len(p.candidates)} documents (query {p.qid!r}, pool {p.pool})")
        out.append([float(r.score) for r in ro])
    return out


def score_pools(candidates: pl.DataFrame, scorer: Any, *, b: int, chunking: str, seed: int, query_sample_seed: int,
                queries: int, pool: int = POOL_SIZE, depth: int | None = None, max_doc_chars: int | None = None,
                progress: bool = False) -> PoolScores:
    """One row per document per list of each sampled query.

    Queries with at least ``depth`` (default pool + 1) candidates are eligible; the first
    ``queries`` of them in stable-seed order (``query_sample_seed``) are scored, the others are
    counted in ``skipped``. ``seed`` draws each query's drop rank. Rows: query_id, doc_id, pool
    (canonical | replace | drop), position (0-based in that list), score, drop_rank.
    ``max_doc_chars`` cuts every document as the score job's protocol does (same prompts, same cache keys).
    """
    check_candidates(candidates)
    depth = default_depth(pool) if depth is None else depth
    groups = {str(qid): g.sort("first_stage_rank")
              for (qid,), g in candidates.group_by("query_id", maintain_order=True)}
    eligible = [q for q, g in groups.items() if g.height >= depth]
    skipped = len(groups) - len(eligible)
    if skipped:
        log.warning("pool perturbation: %d of %d queries have fewer than %d candidates and are skipped",
                    skipped, len(groups), depth)
    if not eligible:
        raise InvalidInput(f"pool perturbation: no query has {depth} candidates (of {len(groups)} queries)")
    sampled = sample_queries(eligible, query_sample_seed, queries)
    if len(sampled) < queries:
        log.warning("pool perturbation: %d eligible queries, fewer than the %d asked for; all are scored",
                    len(sampled), queries)
    drops = {q: drop_rank(seed, q, pool) for q in sampled}
    prompts = [p for q in sampled for p in _layout(q, groups[q], drops[q], b, chunking, pool, depth)]
    texts = {q: [prepare_doc(t, max_doc_chars) for t in groups[q]["doc"].to_list()] for q in sampled}
    scores = read_with_progress(scorer, len(prompts), "score pools",
                                lambda: _read(scorer, prompts, {q: groups[q] for q in sampled}, texts), progress)
    return PoolScores(_rows(prompts, scores, groups, drops), skipped)


def _rows(prompts: list[_Prompt], scores: list[list[float]], groups: dict[str, pl.DataFrame],
          drops: dict[str, int]) -> pl.DataFrame:
    cols: dict[str, list] = {name: [] for name in POOL_SCORE_SCHEMA}
    doc_ids = {q: [str(d) for d in groups[q]["doc_id"].to_list()] for q in drops}
    for p, values in zip(prompts, scores):
        cols["query_id"] += [p.qid] * len(values)
        cols["doc_id"] += [doc_ids[p.qid][i] for i in p.candidates]
        cols["pool"] += [p.pool] * len(values)
        cols["position"] += p.positions
        cols["score"] += values
        cols["drop_rank"] += [drops[p.qid]] * len(values)
    out = pl.DataFrame(cols, schema=POOL_SCORE_SCHEMA)
    if out["score"].is_nan().any():
        raise RuntimeError("pool perturbation: the scorer returned a NaN score")
    pool_order = pl.col("pool").replace_strict({name: i for i, name in enumerate(POOLS)}, return_dtype=pl.Int8)
    query_order = pl.col("query_id").replace_strict({q: i for i, q in enumerate(drops)}, return_dtype=pl.Int64)
    return out.sort(query_order, pool_order, "position")


__all__ = ["POOL_SCORE_SCHEMA", "PoolScores", "check_candidates", "score_pools"]
