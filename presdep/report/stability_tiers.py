"""Rank(UB) and tiers of one leaderboard column, from its paired bootstrap (docs/methods/stability.md).

numpy only, on the bootstrap's :class:`~presdep.report.bootstrap.RankStatistics`:

* Row a is **significantly better** than row b at level L when the paired-bootstrap
  percentile interval (coverage L) of mean_a - mean_b lies wholly on the side the column
  prefers: its lower end above 0 (higher is better) or its upper end below 0 (lower is
  better). The ends are rounded to 12 decimals first, as ties are, so float noise
  between identical rows never separates them. At L = 95% the interval is the JSON's
  ``differenceInterval95``.
* **Rank(UB)** of a row = 1 + the number of rows significantly better than it.
* **Tiers**, walked from the best: take the rows in full-sample order (best first, the
  JSON's ``variants``); the first row opens tier 1; each next row joins the current tier
  unless a member of that tier is significantly better than it (or it than a member,
  should the bootstrap ever disagree with the order), in which case it opens the next
  tier. So no tier holds a separable pair, tiers are contiguous in that order, and a
  tier opens only where one must: no contiguous split without separable pairs inside a
  tier has fewer tiers.
* **Multiplicity**: none of this is adjusted for multiplicity. Each pair's interval has
  coverage L on its own; nothing corrects across the V(V-1)/2 pairs. The JSON says so in
  ``multiplicity``; a family-wise level (Bonferroni: 1 - (1 - L) / pairs) is the caller's
  to choose as L.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from presdep.report.bootstrap import DEFAULT_LEVEL, RankStatistics, difference_interval, tie_score


def significantly_better(interval: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """(V, V) bool from a (2, V, V) interval of mean_a - mean_b: [a, b] when a is significantly better than b."""
    # The end nearest 0 on the preferred side must clear 0; tie_score rounds and makes larger better.
    edge = interval[1] if lower_is_better else interval[0]
    return tie_score(edge, lower_is_better) > 0


def separability(st: RankStatistics, lower_is_better: bool, level: float = DEFAULT_LEVEL) -> np.ndarray:
    """(V, V) bool: [a, b] when a is significantly better than b at ``level``; reuses the 95% intervals."""
    interval = st.difference_interval if level == DEFAULT_LEVEL else difference_interval(st.boot, level)
    return significantly_better(interval, lower_is_better)


def rank_upper_bound(better: np.ndarray) -> np.ndarray:
    """(V,) Rank(UB): 1 + the number of rows significantly better than each row (column sums)."""
    return 1 + better.sum(axis=0).astype(np.int64)


def separation_free_tiers(better: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """(V,) tier of each row (1 = best), walking ``order`` (best first): a row joins the current tier
    unless it and a member of that tier are separable (``better`` either way); then it opens the next."""
    # Checking every member, not only the first, is what keeps separable pairs apart: with B better
    # than C and A separable from neither, a tier led by A alone would take in all three.
    tier = np.zeros(better.shape[0], dtype=np.int64)
    members: list[int] = []
    current = 0
    for v in order:
        if not members or better[members, v].any() or better[v, members].any():
            members, current = [], current + 1
        members.append(v)
        tier[v] = current
    return tier


def unadjusted_clause(level: float, n_rows: int) -> str:
    """The short form of the multiplicity statement, for captions: the intervals are per pair."""
    pairs = n_rows * (n_rows - 1) // 2
    return (f"unadjusted: per-pair {level_label(level)} paired-bootstrap intervals, no correction across "
            f"the {pairs} {'pair' if pairs == 1 else 'pairs'} of {n_rows} rows")


def multiplicity_statement(level: float, n_rows: int) -> str:
    """How the pairwise intervals behind Rank(UB) and the tiers treat multiplicity (not at all), with the
    level that Bonferroni's family-wise correction would need instead."""
    pairs = n_rows * (n_rows - 1) // 2
    if pairs < 2:  # one pair (or none) is its own family
        return unadjusted_clause(level, n_rows)
    bonferroni = 1 - (1 - level) / pairs
    return f"{unadjusted_clause(level, n_rows)}; family-wise (Bonferroni) would need level {bonferroni:.6g}"


def tier_fields(names: Sequence[str], order: Sequence[int], better: np.ndarray, level: float) -> dict[str, Any]:
    """The JSON fields: tierLevel, multiplicity, rankUB and tier per variant, tiers (lists of variants), best first."""
    ub, tier = rank_upper_bound(better), separation_free_tiers(better, order)
    tiers: list[list[str]] = [[] for _ in range(int(tier.max(initial=0)))]
    for v in order:
        tiers[tier[v] - 1].append(names[v])
    return {
        "tierLevel": float(level),
        "multiplicity": multiplicity_statement(level, len(order)),
        "rankUB": {names[v]: int(ub[v]) for v in order},
        "tier": {names[v]: int(tier[v]) for v in order},
        "tiers": tiers,
    }


def level_label(level: float) -> str:
    """``0.95`` -> ``"95%"``, ``0.975`` -> ``"97.5%"``."""
    return f"{round(100 * level, 10):g}%"
