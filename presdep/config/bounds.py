"""Upper bounds of the config's resample, presentation and draw counts, checked before any job.

The schema bounds each count from below only; a count of 10^12 passed it and died inside its
job in a numpy error that named no key. Each bound here is the most its job can hold in memory
or finish in a day of work, measured on the bootstraps as they are written (numpy, one core):

- ``stability.resamples``: the rank bootstrap holds about 10 KB per resample with 20 Table 1
  rows (float64 means and ranks per row, and rows x rows pairwise comparisons), ~50 us of work
  per resample and column. 10^5 resamples: ~1 GB of the job's 4 GB, seconds per column.
- ``contrasts``, ``pool_perturbation``, ``width``: the paired hierarchical bootstrap holds a few
  float64 per run and resample (~200 B) and takes ~10 us per resample and cell (six datasets of
  100 queries). 10^6 resamples: ~200 MB, ~10 s per cell, minutes for a table of 50 cells.
- ``context_decomposition.resamples``: the query bootstrap draws all its indices at once, an int64
  index and a float64 value per query and resample (16 B): 10^6 resamples of the default 100
  queries are 1.6 GB; :data:`DRAW_MEMORY_BYTES` bounds resamples x queries as well.
- presentation counts (``M``, ``noise_rereads``, ``T``, the context decomposition's ``shuffles``,
  BSC's ``bsc_k`` x ``bsc_ensembles``): each presentation is a model read of every prompt of a
  query. At 1000, a 100-candidate query at B = 20 is 5,000 prompts of ~6,000 tokens: about half
  an hour per query at the ~15,500 tokens/s ceiling of a scoring job (docs/guide/speed.md), a day
  for DL19's 43 queries with one model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

MAX_RANK_RESAMPLES = 100_000
MAX_PAIRED_RESAMPLES = 1_000_000
MAX_PRESENTATIONS = 1_000
# Memory the query bootstrap's draws may take: half of the 4 GB a light job asks for.
DRAW_MEMORY_BYTES = 2 * 1024**3
_BYTES_PER_DRAW = 16  # an int64 index and the float64 value it picks

# YAML path ('*': any entry of a mapping section) -> (bound, what the count costs).
COUNT_BOUNDS: dict[str, tuple[int, str]] = {
    "stability.resamples": (MAX_RANK_RESAMPLES, "the rank bootstrap holds ~10 KB per resample"),
    "contrasts.resamples": (MAX_PAIRED_RESAMPLES, "~10 us per resample and contrast cell"),
    "pool_perturbation.resamples": (MAX_PAIRED_RESAMPLES, "~10 us per resample and contrast cell"),
    "width.resamples": (MAX_PAIRED_RESAMPLES, "~10 us per resample and row"),
    "context_decomposition.resamples": (MAX_PAIRED_RESAMPLES, "16 bytes per resample and query, held at once"),
    "protocol.M": (MAX_PRESENTATIONS, "each presentation is a model read of every prompt of a query"),
    "datasets.*.M": (MAX_PRESENTATIONS, "each presentation is a model read of every prompt of a query"),
    "protocol.noise_rereads": (MAX_PRESENTATIONS, "each re-read is a model read of every prompt of a query"),
    "teachers.*.T": (MAX_PRESENTATIONS, "each teacher presentation is a model read of every prompt of a query"),
    "context_decomposition.shuffles": (MAX_PRESENTATIONS, "each shuffle is a model read of every arm of a query"),
}


def _values(node: Any, parts: list[str], path: list[str]) -> Iterator[tuple[str, Any]]:
    """(YAML path, value) of every key ``parts`` matches in ``node`` ('*': every entry)."""
    if not parts:
        yield ".".join(path), node
        return
    if not isinstance(node, Mapping):
        return
    head, rest = parts[0], parts[1:]
    for key in (node if head == "*" else [head] if head in node else []):
        yield from _values(node[key], rest, [*path, str(key)])


def _over(path: str, value: Any, bound: int, why: str) -> str | None:
    # Non-integers are the schema's to refuse (with the key named); only whole numbers are bounded here.
    if isinstance(value, int) and not isinstance(value, bool) and value > bound:
        return f"{path}: {value} is more than {bound:,}, the most this count may be ({why})"
    return None


def bound_problems(config: Mapping[str, Any]) -> list[str]:
    """Every count of ``config`` (schema-validated, defaults filled) above its bound, one line each, key first."""
    out = []
    for pattern, (bound, why) in COUNT_BOUNDS.items():
        for path, value in _values(config, pattern.split("."), []):
            problem = _over(path, value, bound, why)
            if problem:
                out.append(problem)
    for name, v in config["variants"].items():
        passes = v["bsc_k"] * v["bsc_ensembles"] if v["bsc_k"] > 1 else 1
        problem = _over(f"variants.{name}.bsc_k x bsc_ensembles", passes, MAX_PRESENTATIONS,
                        "BSC reads that many shuffles of every query")
        if problem:
            out.append(problem)
    context = config["context_decomposition"]
    draws = context["resamples"] * context["queries"]
    if draws * _BYTES_PER_DRAW > DRAW_MEMORY_BYTES:
        out.append(f"context_decomposition.resamples: {context['resamples']:,} resamples x {context['queries']:,} "
                   f"queries need {draws * _BYTES_PER_DRAW / 1024**3:.1f} GiB of bootstrap draws, more than "
                   f"{DRAW_MEMORY_BYTES / 1024**3:.0f} GiB; lower resamples or context_decomposition.queries")
    return out


__all__ = ["COUNT_BOUNDS", "DRAW_MEMORY_BYTES", "MAX_PAIRED_RESAMPLES", "MAX_PRESENTATIONS", "MAX_RANK_RESAMPLES",
           "bound_problems"]
