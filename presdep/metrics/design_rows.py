"""The run's design as aggregate metrics rows: what Table 1's footnote states as M, B and depth.

Read from the scores themselves, so a dataset's own M or B, a k_input cut, or a scorer that
reads fewer candidates per prompt is reported as run, not as configured:

- ``shuffles_per_query``: random-shuffle presentations per shuffled query (M), mean over queries;
- ``prompt_width``: the widest prompt of those presentations, in candidates (B, or the pool when
  it is smaller);
- ``candidates_per_query``: candidates in a query's first-stage presentation (the depth), mean
  over queries.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from presdep.contracts.views import FIRST_STAGE, RANDOM_SHUFFLE

DESIGN_METRICS = ("shuffles_per_query", "prompt_width", "candidates_per_query")


def design_rows(scores: pl.DataFrame) -> Iterator[tuple[str, None, str, float]]:
    """(perturbation, None, metric, value) rows of DESIGN_METRICS; none where a part is absent."""
    shuffled = scores.filter(pl.col("perturbation") == RANDOM_SHUFFLE)
    if shuffled.height:
        m = shuffled.group_by("query_id").agg(pl.col("presentation").n_unique())["presentation"].mean()
        yield RANDOM_SHUFFLE, None, "shuffles_per_query", float(m)
        if "prompt" in shuffled.columns:  # runs made elsewhere (presdep metrics --runs) have no prompts
            width = shuffled.group_by("query_id", "presentation", "prompt").len()["len"].max()
            yield RANDOM_SHUFFLE, None, "prompt_width", float(width)
    first = scores.filter(pl.col("perturbation") == FIRST_STAGE)
    if first.height:
        depth = first.group_by("query_id").agg(pl.col("doc_id").n_unique())["doc_id"].mean()
        yield RANDOM_SHUFFLE, None, "candidates_per_query", float(depth)
