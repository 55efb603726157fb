"""The ``score_context`` job: one run's context decomposition on one dataset
(docs/methods/context-decomposition.md).

The scorer is the run's own (model, adapter, chunking and B), read through the read cache like a
score job, so the ordinary prompts of A1 and A2 that a score job has read are not read again.
The qrels name each query's judged documents, which never serve as donors.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.schemas import read_table, write_table
from presdep.scoring.context_run import length_error_summary, score_contexts
from presdep.scoring.job import require_settings, single_pass_scorer
from presdep.scoring.read_through import ReadThrough

log = logging.getLogger(__name__)

SETTINGS = ("mode", "pool", "shuffles", "queries", "query_sample_seed")


def score_contexts_file(*, candidates_path: str | os.PathLike, qrels_path: str | os.PathLike,
                        out_path: str | os.PathLike, dataset: str, run: ScoringRun, protocol: Protocol,
                        settings: Mapping[str, Any], threads: int | None = None,
                        read_cache: str | os.PathLike | None = None) -> None:
    """Score the arms of the sampled queries; write ``context_scores`` (donor length errors in its metadata)."""
    require_settings(settings, SETTINGS, "context_decomposition")
    scorer = single_pass_scorer(run, protocol, "the context decomposition", threads=threads, read_cache=read_cache)
    qrels = read_table(qrels_path, "qrels")
    judged = {str(q): {str(d) for d in g["doc_id"]} for (q,), g in qrels.group_by("query_id")}
    result = score_contexts(read_table(candidates_path, "candidates"), judged,
                            scorer, b=protocol.B, chunking=run.variant.chunking, mode=str(settings["mode"]),
                            pool=int(settings["pool"]), shuffles=int(settings["shuffles"]),
                            queries=int(settings["queries"]), query_sample_seed=int(settings["query_sample_seed"]),
                            max_doc_chars=protocol.max_doc_chars, progress=True)
    if isinstance(scorer, ReadThrough):
        scorer.cache.write_job_shard()
    queries = result.scores["query_id"].n_unique()
    donors = length_error_summary(result.length_errors)
    log.info("%s: context decomposition of %d queries; donors' length error mean %s, exact share %s", dataset,
             queries, donors["mean"], donors["exact_share"])
    write_table(result.scores, out_path, "context_scores",
                {"context_decomposition": dict(settings), "protocol": protocol.as_dict(), "variant": run.as_dict()},
                dataset=dataset, queries=queries, donor_length_error=donors,
                scorer=scorer.describe() if hasattr(scorer, "describe") else {"scorer": run.variant.scorer})


__all__ = ["score_contexts_file"]
