"""Presentations of a candidate list and how a presented list is cut into prompts.

A *presentation* is an ordering of a query's whole candidate list. A *chunking*
cuts a presented list into P = ceil(n / B) prompts of at most B documents.

Random shuffle m follows one of three named rules (``SHUFFLE_RULES``):

* ``paper`` (the default, the paper's released code): the list in first-stage order
  shuffled by ``random.Random(m).shuffle``, so every query of the same pool size gets
  the same permutation of slots;
* ``per_query``: an independent draw per (base seed, dataset, query, m) through
  :func:`stable_seed` (presdep's v2 rule), so queries do not share permutations;
* ``cyclic``: a balanced design, not a draw (:func:`cyclic_order`): each prompt keeps its
  first-stage members and presentation m rotates them by m slots, so M = B presentations
  put every candidate in every slot of its prompt exactly once (a Latin square per prompt).

All are the same on every machine, in every process and in every execution order.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from presdep.contracts.errors import InvalidInput, PresdepError

T = TypeVar("T")

PERTURBATIONS = ("random_shuffle", "within_chunk", "middle_injection")
# protocol.noise_rereads off: the canonical presentation is read once (no noise floor measured).
NO_NOISE_REREADS = 0
# How a presented list is cut into prompts; the round-robin row deals EVERY pass (the
# first-stage order and each shuffle) round-robin, every other row cuts contiguously.
CHUNKINGS = ("contiguous", "round_robin")
SHUFFLE_RULES = ("paper", "per_query", "cyclic")
PAPER_SHUFFLE_RULE = "paper"
CYCLIC_SHUFFLE_RULE = "cyclic"
# Presentation indices of middle_injection, in order.
INJECTION_PLACES = ("top", "middle", "bottom")


class NoRelevantDocument(PresdepError, LookupError):
    """middle_injection needs a relevant document (grade >= 1) and the query has none."""


def _canonical(part: object) -> object:
    # bool is an int subclass: keep it distinct from 0/1 in the encoding.
    if isinstance(part, bool):
        return {"bool": part}
    if isinstance(part, (int, np.integer)):
        return {"int": int(part)}
    if isinstance(part, str):
        return {"str": part}
    raise TypeError(
        f"stable_seed parts must be int or str, got {type(part).__name__} ({part!r}); "
        "floats and other objects have no canonical encoding"
    )


def stable_seed(base_seed: int, *parts: int | str) -> int:
    """A 64-bit seed from sha256 over a canonical JSON encoding of the parts.

    Never Python's ``hash()`` (salted per process). Type-tagged, so ``1`` and
    ``"1"`` give different seeds.
    """
    payload = json.dumps(
        [_canonical(base_seed), *(_canonical(p) for p in parts)],
        separators=(",", ":"),
        ensure_ascii=True,
        sort_keys=True,
    )
    digest = hashlib.sha256(payload.encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big")


def shuffle_seed(base_seed: int, dataset: str, query_id: str, m: int) -> int:
    """The seed of random shuffle m of a query (docs/methods/presentations.md: base seed, dataset, query id, m)."""
    return stable_seed(base_seed, dataset, query_id, m)


def paper_shuffle(items: Sequence[T], m: int) -> list[T]:
    """Shuffle m under the paper's rule: ``random.Random(m).shuffle`` of the list (Mersenne
    Twister, Fisher-Yates). The permutation depends on m and the list's length only."""
    out = list(items)
    random.Random(int(m)).shuffle(out)
    return out


def shuffle_order(n: int, m: int, rule: str, *, base_seed: int, dataset: str, query_id: str,
                  b: int | None = None, chunking: str = "contiguous") -> list[int]:
    """Shuffle m of a query's n candidates, as indices into first-stage order, under ``rule``.

    ``b`` and ``chunking`` (the prompt size and the variant's chunking) are read by the
    cyclic rule only, whose presentations rotate each prompt's members; the others ignore them."""
    if rule == "paper":
        return paper_shuffle(range(n), m)
    if rule == "per_query":
        return random_shuffle(range(n), shuffle_seed(base_seed, dataset, query_id, m))
    if rule == CYCLIC_SHUFFLE_RULE:
        if b is None:
            raise InvalidInput("shuffle_rule cyclic rotates each prompt's members: it needs the chunk size B "
                               "(and the variant's chunking)")
        return cyclic_order(n, m, b, chunking)
    raise InvalidInput(f"unknown shuffle rule {rule!r}; expected one of {SHUFFLE_RULES}")


def cyclic_order(n: int, m: int, b: int, chunking: str = "contiguous") -> list[int]:
    """Presentation m of the cyclic design, as indices into first-stage order.

    The prompts keep the members the first-stage order cut by ``chunking`` gives them (as
    :func:`within_chunk` does, so companions never change and only the slot does); inside a
    prompt of L members, the member at slot k of the first-stage cut moves to slot
    (k + m) mod L. Presentation 0 is the first-stage order; m = 0..L-1 put every member in
    every slot of its prompt once. Cut again by ``chunking``, the result gives those prompts.
    """
    if not isinstance(m, (int, np.integer)) or isinstance(m, bool) or m < 0:
        raise InvalidInput(f"presentation m must be a non-negative integer, got {m!r}")
    out = list(range(n))
    for pos in chunk_positions(n, b, chunking):
        size = len(pos)
        for k, doc in enumerate(pos):  # in first-stage order, position pos[k] holds document pos[k]
            out[pos[(k + m) % size]] = doc
    return out


def random_shuffle(doc_ids: Sequence[T], rng_seed: int) -> list[T]:
    """Fisher-Yates permutation of the whole list with a PCG64 generator."""
    rng = np.random.Generator(np.random.PCG64(rng_seed))
    out = list(doc_ids)
    # Explicit Fisher-Yates (not rng.permutation) so the algorithm is ours and fixed.
    for i in range(len(out) - 1, 0, -1):
        j = int(rng.integers(0, i + 1))
        out[i], out[j] = out[j], out[i]
    return out


def _check_b(n: int, b: int) -> int:
    if not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b < 1:
        raise InvalidInput(f"chunk size B must be a positive integer, got {b!r}")
    return max(1, math.ceil(n / b)) if n else 0


def chunk_positions(n: int, b: int, chunking: str = "contiguous") -> list[list[int]]:
    """Positions (0-based, in the presented list) of each prompt, in slot order."""
    p = _check_b(n, b)
    if chunking == "contiguous":
        return [list(range(j * b, min((j + 1) * b, n))) for j in range(p)]
    if chunking == "round_robin":
        # Prompt j gets positions j, j+P, j+2P, ...; sizes differ by at most one.
        return [list(range(j, n, p)) for j in range(p)]
    raise InvalidInput(f"unknown chunking {chunking!r}; expected one of {CHUNKINGS}")


def chunk_contiguous(ids: Sequence[T], b: int) -> list[list[T]]:
    """Consecutive blocks of B: prompt j = positions jB .. jB+B-1."""
    return [[ids[i] for i in pos] for pos in chunk_positions(len(ids), b, "contiguous")]


def chunk_round_robin(ids: Sequence[T], b: int) -> list[list[T]]:
    """P = ceil(n/B) prompts; prompt j = positions j, j+P, j+2P, ... of the list."""
    return [[ids[i] for i in pos] for pos in chunk_positions(len(ids), b, "round_robin")]


def chunk(ids: Sequence[T], b: int, chunking: str = "contiguous") -> list[list[T]]:
    return [[ids[i] for i in pos] for pos in chunk_positions(len(ids), b, chunking)]


def within_chunk(
    doc_ids: Sequence[T], b: int, rng_seed: int, chunking: str = "contiguous"
) -> list[T]:
    """Keep each prompt's membership (first-stage order cut by ``chunking``), shuffle inside.

    The result, cut again with the same chunking, gives the same prompts as the
    input list with the documents of each prompt permuted.
    """
    rng = np.random.Generator(np.random.PCG64(rng_seed))
    out = list(doc_ids)
    for pos in chunk_positions(len(out), b, chunking):
        members = [out[i] for i in pos]
        for i in range(len(members) - 1, 0, -1):
            j = int(rng.integers(0, i + 1))
            members[i], members[j] = members[j], members[i]
        for i, d in zip(pos, members):
            out[i] = d
    return out


def strongest_relevant(doc_ids: Sequence[Hashable], grades: Mapping) -> Hashable:
    """Highest grade >= 1 among the candidates, ties by doc id (smallest first)."""
    best = None
    for d in doc_ids:
        g = grades.get(d, 0)
        if g is None or g < 1:
            continue
        if best is None or g > best[0] or (g == best[0] and str(d) < str(best[1])):
            best = (g, d)
    if best is None:
        raise NoRelevantDocument("no candidate has a relevance grade >= 1")
    return best[1]


def middle_injection(doc_ids: Sequence[T], grades: Mapping) -> list[list[T]]:
    """Three presentations: the strongest relevant document moved to the top, the
    middle (index n//2) and the bottom of the otherwise unchanged first-stage list."""
    target = strongest_relevant(doc_ids, grades)
    rest = [d for d in doc_ids if d != target]
    n = len(doc_ids)
    out = []
    for idx in (0, n // 2, n - 1):
        lst = list(rest)
        lst.insert(idx, target)
        out.append(lst)
    return out
