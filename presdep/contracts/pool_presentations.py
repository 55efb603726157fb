"""The pool perturbation's draws and lists (the paper's appendix program; the order stays fixed).

A query's candidates to depth 101 give a canonical pool (the first 100 in first-stage order)
and two perturbed pools that lose one document at a drawn rank: *replace* appends the 101st
candidate last, *drop* keeps the 99 survivors alone. Survivors are never reordered.

The draws use the paper's stable seed: the first 8 bytes, big-endian, of sha256 over
``"seed\\0qid\\0namespace"``. That is a different encoding from
:func:`presdep.contracts.presentations.stable_seed` (type-tagged JSON), so the two never mix.
"""

from __future__ import annotations

import hashlib
import operator
import random
from collections.abc import Iterable, Sequence
from typing import TypeVar

from presdep.contracts.errors import InvalidInput

T = TypeVar("T")

POOL_SIZE = 100
POOLS = ("canonical", "replace", "drop")
PERTURBED_POOLS = ("replace", "drop")
DROP_RANK_NAMESPACE = "drop-rank"
QUERY_SAMPLE_NAMESPACE = "query-sample"


def _seed_int(seed: object) -> int:
    # bool is an int subclass; a flag passed as a seed is a mistake, not seed 0 or 1.
    if isinstance(seed, bool):
        raise InvalidInput(f"seed must be an integer, got {seed!r}")
    try:
        return operator.index(seed)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidInput(f"seed must be an integer, got {type(seed).__name__} ({seed!r})") from None


def paper_stable_seed(seed: int, qid: str, namespace: str) -> int:
    """First 8 bytes (big-endian) of sha256(f"{seed}\\0{qid}\\0{namespace}"), UTF-8 encoded."""
    if not isinstance(qid, str) or not isinstance(namespace, str):
        raise InvalidInput(f"query id and namespace must be strings, got {qid!r} and {namespace!r}")
    payload = f"{_seed_int(seed)}\0{qid}\0{namespace}".encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big")


def default_depth(pool: int) -> int:
    """Candidates a query needs: the pool and the one document replace appends."""
    return pool + 1


def _check_pool(pool: int, depth: int | None) -> int:
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 2:
        raise InvalidInput(f"pool size must be an integer >= 2, got {pool!r}")
    depth = default_depth(pool) if depth is None else depth
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < pool + 1:
        raise InvalidInput(f"candidate depth must be an integer >= pool size + 1 = {pool + 1}, got {depth!r}")
    return depth


def drop_rank(seed: int, qid: str, pool: int = POOL_SIZE) -> int:
    """The 0-based rank of the pool document both perturbations remove from this query."""
    _check_pool(pool, None)
    return random.Random(paper_stable_seed(seed, qid, DROP_RANK_NAMESPACE)).randrange(pool)


def sample_queries(qids: Iterable[str], seed: int, n: int = 100) -> list[str]:
    """The first ``n`` queries in stable-seed order (ties, never seen in practice, by query id)."""
    ids = list(qids)
    seen: set[str] = set()
    for q in ids:
        if q in seen:
            raise InvalidInput(f"query sample: query id {q!r} is listed twice")
        seen.add(q)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidInput(f"query sample size must be a positive integer, got {n!r}")
    return sorted(ids, key=lambda q: (paper_stable_seed(seed, q, QUERY_SAMPLE_NAMESPACE), q))[:n]


def pool_lists(doc_ids: Sequence[T], drop: int, *, pool: int = POOL_SIZE, depth: int | None = None,
               query_id: str = "?") -> dict[str, list[T]]:
    """The three lists of one query from its candidates in first-stage order.

    ``canonical``: the first ``pool``; ``replace``: canonical without the document at rank
    ``drop``, candidate ``pool`` (the first one past the pool) appended last; ``drop``: the
    survivors alone. Fewer than ``depth`` (default pool + 1) candidates is refused.
    """
    depth = _check_pool(pool, depth)
    if len(doc_ids) < depth:
        raise InvalidInput(f"pool perturbation: query {query_id!r} has {len(doc_ids)} candidates; it needs at least "
                           f"{depth} (a pool of {pool} and the candidate that replaces the dropped one)")
    if len(set(doc_ids[:depth])) != depth:
        raise InvalidInput(f"pool perturbation: query {query_id!r} lists a document twice among its first {depth}")
    if isinstance(drop, bool) or not isinstance(drop, int) or not 0 <= drop < pool:
        raise InvalidInput(f"pool perturbation: drop rank must be an integer in [0, {pool}), got {drop!r}")
    canonical = list(doc_ids[:pool])
    survivors = canonical[:drop] + canonical[drop + 1:]
    return {"canonical": canonical, "replace": [*survivors, doc_ids[pool]], "drop": survivors}


__all__ = [
    "DROP_RANK_NAMESPACE", "PERTURBED_POOLS", "POOLS", "POOL_SIZE", "QUERY_SAMPLE_NAMESPACE", "default_depth",
    "drop_rank", "paper_stable_seed", "pool_lists", "sample_queries",
]
