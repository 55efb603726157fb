"""The context decomposition's layout: presentations, each target's real chunk, and the donors
that stand in for its companions (the paper's appendix program; docs/methods/context-decomposition.md).

A query's pool (its first ``pool`` candidates in first-stage order) is presented in the
canonical order and in ``Random(s).shuffle`` for s = 0 .. shuffles - 1, then cut at B by the
row's chunking, as a score job cuts a presentation. A target at position p sits in its real
chunk at the slot chunking gives it (p mod B for contiguous chunks); the chunk's size is its
width w.

Donors (arm A3): every companion of a target's chunk is replaced by the document of another
query whose length (characters, after whitespace collapse and ``max_doc_chars``) is nearest
the companion's, never one of the target query's pool or judged documents, never twice in
one context. Ties are broken by sha256 of ``"donor:qid:presentation:target:slot"``: the unused
donors at the nearest distance (both sides), ordered by (length, doc id), and the one at index
(the digest as a big-endian integer) mod (their number).
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import chunk_positions

CANONICAL = -1  # the presentation number of the canonical (first-stage) order; shuffles are 0..
DEFAULT_SHUFFLES = 10


def presentation_orders(n: int, shuffles: int = DEFAULT_SHUFFLES) -> dict[int, list[int]]:
    """{presentation: pool indices in presented order}: CANONICAL, then Random(s).shuffle for each s."""
    if isinstance(shuffles, bool) or not isinstance(shuffles, int) or shuffles < 0:
        raise InvalidInput(f"shuffles must be an integer >= 0, got {shuffles!r}")
    out = {CANONICAL: list(range(n))}
    for s in range(shuffles):
        order = list(range(n))
        random.Random(s).shuffle(order)
        out[s] = order
    return out


@dataclass(frozen=True)
class Context:
    """One target in one presentation: its chunk (pool indices in slot order) and its slot."""

    presentation: int
    position: int  # the target's place in the presented list
    members: tuple[int, ...]
    slot: int  # 0-based; members[slot] is the target

    @property
    def target(self) -> int:
        return self.members[self.slot]

    @property
    def width(self) -> int:
        return len(self.members)


def contexts(order: Sequence[int], presentation: int, b: int, chunking: str) -> list[Context]:
    """Every pool member of one presentation in its real chunk, in presented order."""
    out: dict[int, Context] = {}
    for positions in chunk_positions(len(order), b, chunking):
        members = tuple(order[p] for p in positions)
        for slot, p in enumerate(positions):
            out[p] = Context(presentation, p, members, slot)
    return [out[p] for p in range(len(order))]


def donor_tie_hash(qid: str, presentation: int, target: str, slot: int) -> int:
    """sha256("donor:qid:presentation:target:slot"), the whole digest as a big-endian integer."""
    payload = f"donor:{qid}:{presentation}:{target}:{slot}".encode()
    return int.from_bytes(hashlib.sha256(payload).digest(), "big")


@dataclass(frozen=True)
class Donation:
    """The donor of one companion slot and how far its length is from the companion's."""

    slot: int
    donor: str
    length_error: int


class DonorPool:
    """One query's donors (documents of other queries, less its pool and judged documents) by length."""

    def __init__(self, lengths: Mapping[str, int]):
        if not lengths:
            raise InvalidInput("context decomposition: no donor documents (every candidate belongs to the "
                               "target query's pool or judgements)")
        groups: dict[int, list[str]] = {}
        for doc, n in lengths.items():
            groups.setdefault(int(n), []).append(str(doc))
        self.groups = {n: sorted(ids) for n, ids in groups.items()}
        self.sizes = sorted(self.groups)
        self.length_of = {doc: int(n) for doc, n in lengths.items()}

    def _distances(self, length: int) -> Iterable[tuple[int, list[int]]]:
        """(distance, the lengths at it, shorter first), nearest first."""
        right = bisect.bisect_left(self.sizes, length)
        left = right - 1
        while left >= 0 or right < len(self.sizes):
            dl = length - self.sizes[left] if left >= 0 else None
            dr = self.sizes[right] - length if right < len(self.sizes) else None
            d = min(x for x in (dl, dr) if x is not None)
            at = []
            if dl == d:
                at.append(self.sizes[left])
                left -= 1
            if dr == d:
                at.append(self.sizes[right])
                right += 1
            yield d, at

    def _tied(self, at: Sequence[int], i: int) -> str:
        """The i-th donor of the lengths ``at`` taken together, in (length, doc id) order."""
        for n in at:
            if i < len(self.groups[n]):
                return self.groups[n][i]
            i -= len(self.groups[n])
        raise IndexError(i)

    def _index(self, at: Sequence[int], doc: str) -> int:
        """``doc``'s index among the lengths ``at`` taken together, in (length, doc id) order."""
        n = self.length_of[doc]
        before = sum(len(self.groups[m]) for m in at[: at.index(n)])
        return before + bisect.bisect_left(self.groups[n], doc)

    def choose(self, length: int, used: set[str], tie_hash: int) -> tuple[str, int]:
        """(donor, |length error|): the nearest donor not in ``used``, ties broken as the module says.
        ``used`` holds this context's donors so far (a handful), so the tie list of the unused is never
        built: the i-th unused one is found by stepping over the used ones before it."""
        for d, at in self._distances(length):
            total = sum(len(self.groups[n]) for n in at)
            taken = sorted(self._index(at, doc) for doc in used if self.length_of.get(doc) in at)
            if len(taken) >= total:
                continue
            i = tie_hash % (total - len(taken))
            for t in taken:  # ascending: each used one at or before the i-th unused shifts it on
                if t <= i:
                    i += 1
            return self._tied(at, i), d
        raise InvalidInput(f"context decomposition: too few donor documents for a context ({len(used)} used)")


def donations(context: Context, qid: str, doc_ids: Sequence[str], lengths: Sequence[int],
              pool: DonorPool) -> list[Donation]:
    """A donor for every companion slot of ``context`` (slot order), none reused in it."""
    used: set[str] = set()
    out = []
    target = doc_ids[context.target]
    for slot, member in enumerate(context.members):
        if slot == context.slot:
            continue
        donor, err = pool.choose(lengths[member], used, donor_tie_hash(qid, context.presentation, target, slot))
        used.add(donor)
        out.append(Donation(slot, donor, err))
    return out


__all__ = ["CANONICAL", "DEFAULT_SHUFFLES", "Context", "Donation", "DonorPool", "contexts", "donations",
           "donor_tie_hash", "presentation_orders"]
