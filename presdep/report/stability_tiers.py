"""Rank(UB) and tiers of one leaderboard column, from its paired bootstrap (docs/methods/stability.md).

numpy only, on the bootstrap's :class:`~presdep.report.bootstrap.RankStatistics`:

* Row a is **significantly better** than row b at level L when the paired-bootstrap
  percentile interval (coverage L) of mean_a - mean_b lies wholly on the side the column
  prefers: its lower end above 0 (higher is better) or its upper end below 0 (lower is
  better). The ends are rounded to 12 decimals first, as ties are, so float noise
  between identical rows never separates them. At L = 95% the interval is the JSON's
  ``differenceInterval95``.
* **Rank(UB)** of a row = 1 + the number of rows significantly better than it.
* **Tiers**, greedy from the best: walk the rows in full-sample order (best first, the
  JSON's ``variants``); the first row opens tier 1 and is its leader; each next row
  joins the current tier unless its tier's leader is significantly better than it, in
  which case it opens the next tier and leads it. Tiers are contiguous in that order.
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


def greedy_tiers(better: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """(V,) tier of each row (1 = best): a new tier opens at the first row, in ``order`` (best first),
    that the current tier's leader is significantly better than."""
    tier = np.zeros(better.shape[0], dtype=np.int64)
    leader, current = None, 0
    for v in order:
        if leader is None or better[leader, v]:
            leader, current = v, current + 1
        tier[v] = current
    return tier


def tier_fields(names: Sequence[str], order: Sequence[int], better: np.ndarray, level: float) -> dict[str, Any]:
    """The JSON fields: tierLevel, rankUB and tier per variant, tiers (lists of variants), best first."""
    ub, tier = rank_upper_bound(better), greedy_tiers(better, order)
    tiers: list[list[str]] = [[] for _ in range(int(tier.max(initial=0)))]
    for v in order:
        tiers[tier[v] - 1].append(names[v])
    return {
        "tierLevel": float(level),
        "rankUB": {names[v]: int(ub[v]) for v in order},
        "tier": {names[v]: int(tier[v]) for v in order},
        "tiers": tiers,
    }


def level_label(level: float) -> str:
    """``0.95`` -> ``"95%"``, ``0.975`` -> ``"97.5%"``."""
    return f"{round(100 * level, 10):g}%"
