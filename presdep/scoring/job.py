"""The `score` job: build the run's records once, score all presentations, write one file.

A capcal variant scores no document: it recalibrates the stored probabilities of the
run it reuses (``reuse_scores_path``) with per-query content-free probes.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from presdep.config.records import Protocol, ScoringRun, Variant
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_table
from presdep.contracts.selection import adapter_for
from presdep.runtime.process_age import process_age_s
from presdep.runtime.torch_threads import limit_torch_threads
from presdep.scoring.capcal import calibrate_scores_file
from presdep.scoring.factory import make_scorer
from presdep.scoring.read_through import ReadThrough, with_read_cache
from presdep.scoring.run import score_dataset


def require_settings(settings: Mapping[str, Any], keys: Sequence[str], block: str) -> None:
    """Refuse an appendix program's settings that lack one of ``keys`` (the rule passes them from ``block``)."""
    missing = [k for k in keys if k not in settings]
    if missing:
        raise InvalidInput(f"{block} settings lack {missing}; got {sorted(settings)}")


def single_pass_scorer(run: ScoringRun, protocol: Protocol, program: str, *, threads: int | None = None,
                       read_cache: str | os.PathLike | None = None) -> Any:
    """The run's own scorer for an appendix program that reads one fixed scorer's single pass (the
    pool perturbation, the context decomposition), read through the run's read cache."""
    if run.variant.calibration != "none" or run.variant.bsc_k != 1:
        raise InvalidInput(f"variant {run.name!r}: {program} reads one fixed scorer's single pass; a calibrated "
                           "or BSC row has none of its own")
    if run.variant.capabilities.local_model:
        limit_torch_threads(threads)
    scorer = make_scorer(run, protocol.prompt)
    if read_cache is not None:
        scorer = with_read_cache(scorer, read_cache, declared=run.variant.capabilities.probabilities)
    return scorer


def scoring_run(
    name: str,
    variant_spec: Mapping[str, Any],
    *,
    model: Mapping[str, Any] | None = None,
    model_dir: str | os.PathLike | None = None,
    selected_path: str | os.PathLike | None = None,
    seed: int | None = None,
) -> ScoringRun:
    """The run's record from a job's params and inputs: the validated variant entry, its models
    entry with the folder it was fetched to, and (trained variants) the adapter chosen for ``seed``."""
    record = Variant.from_spec(name, variant_spec)
    entry = None
    if model is not None:
        # The config name and entry stay in the description, so CapCal can check that the
        # scores it reuses come from this model.
        entry = {**model, "name": record.model, **({"path": str(model_dir)} if model_dir else {})}
    adapter = adapter_for(selected_path, seed) if selected_path else None
    return ScoringRun(variant=record, model=entry, adapter=adapter, training_seed=seed if adapter else None)


def score_dataset_files(
    *,
    candidates_path: str | os.PathLike,
    qrels_path: str | os.PathLike | None,
    out_path: str | os.PathLike,
    dataset: str,
    run: ScoringRun,
    protocol: Protocol,
    reuse_scores_path: str | os.PathLike | None = None,
    threads: int | None = None,
    read_cache: str | os.PathLike | None = None,
) -> dict | None:
    """Returns the job's profile (None for a capcal job); ``read_cache`` is the read cache's folder."""
    if run.variant.capabilities.local_model:  # the others never load torch
        limit_torch_threads(threads)
    startup_s = process_age_s()  # interpreter (or fork), Snakemake's preamble and imports
    if run.variant.calibration == "capcal":
        if not reuse_scores_path:
            raise InvalidInput(f"variant with calibration capcal needs the scores it reuses (reuse_scores_of) "
                               f"for dataset {dataset!r}")
        scorer = None
        if read_cache:
            # The probes go through the read cache too: a re-run reads none of them again.
            scorer = with_read_cache(make_scorer(run, protocol.prompt), read_cache,
                                     declared=run.variant.capabilities.probabilities)
        cache = scorer.cache if isinstance(scorer, ReadThrough) else None
        calibrate_scores_file(source_path=reuse_scores_path, candidates_path=candidates_path, out_path=out_path,
                              dataset=dataset, run=run, protocol=protocol, scorer=scorer, cache=cache)
        if cache is not None:
            cache.write_job_shard()
        return None
    candidates = read_table(candidates_path, "candidates")
    qrels = read_table(qrels_path, "qrels") if qrels_path else None
    return score_dataset(candidates, dataset=dataset, run=run, protocol=protocol, out_path=out_path,
                         qrels=qrels, read_cache=read_cache, startup_s=startup_s)
