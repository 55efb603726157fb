"""The ``score_render`` job: one run's render perturbations on one dataset
(docs/methods/render-perturbations.md).

The scorer is the run's own (model, adapter, chunking and B), read through the read cache like a
score job, so the canonical prompts a score job has read are not read again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.schemas import read_table, write_table
from presdep.scoring.job import require_settings, single_pass_scorer
from presdep.scoring.read_through import ReadThrough
from presdep.scoring.render_run import score_renders
from presdep.scoring.template import DEFAULT_TEMPLATE

log = logging.getLogger(__name__)

SETTINGS = ("kinds", "seed", "queries", "query_sample_seed")


def score_renders_file(*, candidates_path: str | os.PathLike, out_path: str | os.PathLike, dataset: str,
                       run: ScoringRun, protocol: Protocol, settings: Mapping[str, Any], threads: int | None = None,
                       read_cache: str | os.PathLike | None = None) -> None:
    """Score the render variants of the sampled queries; write them in the ``scores`` contract."""
    require_settings(settings, SETTINGS, "render_perturbations")
    scorer = single_pass_scorer(run, protocol, "the render perturbations", threads=threads, read_cache=read_cache)
    queries = settings["queries"]
    scores = score_renders(read_table(candidates_path, "candidates"), scorer, b=protocol.B,
                           chunking=run.variant.chunking, kinds=list(settings["kinds"]), seed=int(settings["seed"]),
                           query_sample_seed=int(settings["query_sample_seed"]),
                           queries=None if queries is None else int(queries),
                           rubric=protocol.prompt.rubric or DEFAULT_TEMPLATE, max_doc_chars=protocol.max_doc_chars,
                           progress=True)
    if isinstance(scorer, ReadThrough):
        scorer.cache.write_job_shard()
    n = scores["query_id"].n_unique()
    log.info("%s: render perturbations %s of %d queries", dataset, list(settings["kinds"]), n)
    write_table(scores, out_path, "scores",
                {"render_perturbations": dict(settings), "protocol": protocol.as_dict(), "variant": run.as_dict()},
                dataset=dataset, queries=n,
                scorer=scorer.describe() if hasattr(scorer, "describe") else {"scorer": run.variant.scorer})


__all__ = ["score_renders_file"]
