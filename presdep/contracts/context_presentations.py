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
one context. Among the unused donors at the nearest distance (both sides), ordered by
(length, doc id), ``Random(stable seed of "donor:qid:presentation:target:slot")`` draws
indices until an unused one comes up.
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


def donor_seed(qid: str, presentation: int, target: str, slot: int) -> int:
    """First 8 bytes (big-endian) of sha256("donor:qid:presentation:target:slot")."""
    payload = f"donor:{qid}:{presentation}:{target}:{slot}".encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big")


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

    def choose(self, length: int, used: set[str], seed: int) -> tuple[str, int]:
        """(donor, |length error|): the nearest donor not in ``used``, ties drawn as the module says.
        ``used`` holds this context's donors so far (a handful), so no tie list is ever built."""
        for d, at in self._distances(length):
            total = sum(len(self.groups[n]) for n in at)
            if sum(1 for doc in used if self.length_of.get(doc) in at) >= total:
                continue
            if total == 1:
                return self._tied(at, 0), d
            rng = random.Random(seed)
            while True:
                doc = self._tied(at, rng.randrange(total))
                if doc not in used:
                    return doc, d
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
        donor, err = pool.choose(lengths[member], used, donor_seed(qid, context.presentation, target, slot))
        used.add(donor)
        out.append(Donation(slot, donor, err))
    return out


__all__ = ["CANONICAL", "DEFAULT_SHUFFLES", "Context", "Donation", "DonorPool", "contexts", "donations",
           "donor_seed", "presentation_orders"]
