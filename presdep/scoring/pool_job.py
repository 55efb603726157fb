"""The ``score_pool`` job: one run's pool perturbation on one dataset (docs/methods/pool-perturbation.md).

The scorer is the run's own (its model, adapter, chunking and B), read through the read cache
like a score job, so the canonical pool's prompts a score job has read are not read again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.schemas import read_table, write_table
from presdep.scoring.job import require_settings, single_pass_scorer
from presdep.scoring.pool_run import score_pools
from presdep.scoring.read_through import ReadThrough

log = logging.getLogger(__name__)

SETTINGS = ("pool", "seed", "query_sample_seed", "queries")


def score_pools_file(*, candidates_path: str | os.PathLike, out_path: str | os.PathLike, dataset: str,
                     run: ScoringRun, protocol: Protocol, settings: Mapping[str, Any], threads: int | None = None,
                     read_cache: str | os.PathLike | None = None) -> None:
    """Score the canonical, replace and drop pools of the sampled queries; write ``pool_scores``."""
    require_settings(settings, SETTINGS, "pool_perturbation")
    scorer = single_pass_scorer(run, protocol, "the pool perturbation", threads=threads, read_cache=read_cache)
    result = score_pools(read_table(candidates_path, "candidates"), scorer, b=protocol.B,
                         chunking=run.variant.chunking, seed=int(settings["seed"]),
                         query_sample_seed=int(settings["query_sample_seed"]), queries=int(settings["queries"]),
                         pool=int(settings["pool"]), max_doc_chars=protocol.max_doc_chars, progress=True)
    if isinstance(scorer, ReadThrough):
        scorer.cache.write_job_shard()
    queries = result.scores["query_id"].n_unique()
    log.info("%s: pool perturbation of %d queries (%d with too few candidates skipped)", dataset, queries,
             result.skipped)
    write_table(result.scores, out_path, "pool_scores",
                {"pool_perturbation": dict(settings), "protocol": protocol.as_dict(), "variant": run.as_dict()},
                dataset=dataset, queries=queries, skipped=result.skipped,
                scorer=scorer.describe() if hasattr(scorer, "describe") else {"scorer": run.variant.scorer})


__all__ = ["score_pools_file"]
