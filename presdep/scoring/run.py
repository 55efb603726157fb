"""Score every presentation of every query of a dataset into one ``scores`` file.

Every row is the single-pass readout of one document in one presentation; nothing
is averaged here (BSC's means over shuffles are views computed downstream).

One job loops over all presentations (never a wildcard per presentation). Each
finished query is flushed to a sidecar folder ``<out>.partial/`` (one Arrow IPC
file per query, written atomically), so a job killed at any point resumes where
it stopped; the final Parquet is written atomically and equals an uninterrupted
run's, and the sidecar is then removed. A scorer that reads through the read cache
(:mod:`presdep.scoring.read_cache`) also never repeats a prompt another variant, run or
killed job has read; the sidecar then only saves re-assembling finished queries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from presdep import __version__
from presdep.config.records import Protocol, ScoringRun, Variant
from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import (
    INJECTION_PLACES,
    chunk_positions,
)
from presdep.contracts.schemas import SCHEMAS, atomic_write, write_table, write_text_atomic
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import BATCH_NOISE
from presdep.runtime.resume import partial_dir, resume_dir
from presdep.scoring.factory import make_scorer
from presdep.scoring.query_rows import (
    QueryPlan,
    finish_query,
    measures_noise,
    plan_query,
    shuffle_count,
)
from presdep.scoring.read_through import ReadThrough, with_read_cache
from presdep.scoring.score_progress import Progress

log = logging.getLogger(__name__)

CANDIDATE_COLUMNS = ("query_id", "query", "doc_id", "doc", "first_stage_rank")
_SCORE_COLS = SCHEMAS["scores"].names


def _check_candidates(c: pl.DataFrame) -> None:
    missing = [x for x in CANDIDATE_COLUMNS if x not in c.columns]
    if missing:
        raise InvalidInput(f"candidates lack column(s) {missing}; have {c.columns}")
    if c.height == 0:
        raise InvalidInput("candidates table is empty")
    dup = c.select("query_id", "doc_id").is_duplicated()
    if dup.any():
        r = int(dup.arg_max())
        raise InvalidInput(f"candidates: duplicate (query_id, doc_id) = ({c['query_id'][r]!r}, {c['doc_id'][r]!r})")
    dup = c.select("query_id", "first_stage_rank").is_duplicated()
    if dup.any():
        r = int(dup.arg_max())
        raise InvalidInput(f"candidates: query {c['query_id'][r]!r} repeats first_stage_rank {c['first_stage_rank'][r]}")
    nq = c.group_by("query_id").agg(pl.col("query").n_unique().alias("n")).filter(pl.col("n") > 1)
    if nq.height:
        raise InvalidInput(f"candidates: query {nq['query_id'][0]!r} has more than one query text")


def _sha256_frame(df: pl.DataFrame | None) -> str | None:
    if df is None:
        return None
    h = hashlib.sha256()
    for name in df.columns:
        h.update(name.encode() + b"\x00")
        for v in df[name].to_list():
            h.update(repr(v).encode() + b"\x1f")
    return h.hexdigest()


def _partial_name(qid: str) -> str:
    return "q-" + hashlib.sha256(qid.encode("utf-8")).hexdigest()[:40] + ".arrow"


def _write_ipc_atomic(df: pl.DataFrame, path: Path) -> None:
    atomic_write(path, df.write_ipc)


def score_dataset(
    candidates: pl.DataFrame,
    *,
    dataset: str,
    run: ScoringRun,
    protocol: Protocol,
    out_path: str | os.PathLike,
    qrels: pl.DataFrame | None = None,
    scorer: Any = None,
    read_cache: str | os.PathLike | None = None,
    startup_s: float | None = None,
) -> dict:
    """Score the first-stage order once and every presentation of ``protocol.perturbations``.

    Rows: perturbation ``first_stage`` (presentation 0, the variant's chunking);
    ``random_shuffle`` 0..M-1 (0..E*K-1 for a BSC variant: raw single-pass scores,
    its ensembles are derived downstream by :mod:`presdep.contracts.views`); ``within_chunk``
    0..M-1; ``middle_injection`` 0..2. Every row is one single-pass readout.

    Writes the ``scores`` contract to ``out_path`` (atomically), resuming from
    ``<out_path>.partial/`` when a previous run with the same inputs was killed.
    ``read_cache``: the read cache's folder, used by scorers that support it (the metadata
    names its identity; its hits and misses, which depend on what earlier and concurrent
    jobs read, go into the profile). Returns the job's profile (also logged as one
    ``profile {json}`` line): prompts, tokens, seconds in start-up, model load, forward passes.
    """
    t_start = time.perf_counter()
    _check_candidates(candidates)
    if run.variant.calibration != "none":
        raise InvalidInput(
            f"calibration {run.variant.calibration!r} does not score documents itself: it recalibrates another "
            "variant's stored probabilities (presdep.scoring.capcal.calibrate_scores)"
        )
    out_path = Path(out_path)
    t_load = time.perf_counter()
    if scorer is None:
        scorer = make_scorer(run, protocol.prompt)
    load_s = time.perf_counter() - t_load
    cache = None
    if read_cache is not None:  # every scorer that reads grade probabilities reads through it
        scorer = with_read_cache(scorer, read_cache, declared=run.variant.capabilities.probabilities)
        cache = scorer.cache if isinstance(scorer, ReadThrough) else None
    if cache is not None:
        log.info("%s: read cache %s (%d entries for this identity)", dataset, cache.dir, len(cache))
    qids = candidates["query_id"].unique(maintain_order=True).to_list()
    grades_by_q = _grades_by_query(qrels)
    skipped = _queries_without_injection(candidates, qrels, grades_by_q, protocol, dataset, len(qids))
    fingerprint = _fingerprint(candidates, qrels, dataset, run, protocol, scorer)
    partial = resume_dir(partial_dir(out_path), json.dumps(fingerprint, sort_keys=True, default=str))
    if cache is not None:  # the reads of queries a killed run finished belong in this job's shard
        cache.keep_journal(partial)
    shuffled = shuffled_queries(qids, protocol, dataset)
    done = _score_missing_queries(candidates, qids, grades_by_q, partial, dataset, run.variant, protocol, scorer,
                                  shuffled, cache)
    if cache is not None:
        cache.write_job_shard()
    _write_scores(qids, partial, out_path, dataset, run, protocol, scorer, fingerprint, skipped, cache, shuffled)
    shutil.rmtree(partial)
    profile = _profile(scorer, cache, dataset=dataset, queries=len(qids), resumed=len(done), startup_s=startup_s,
                       load_s=load_s, total_s=time.perf_counter() - t_start)
    log.info("profile %s", json.dumps(profile, sort_keys=True))
    return profile


def shuffled_queries(qids: Sequence[str], protocol: Protocol, dataset: str) -> frozenset[str]:
    """The queries whose random shuffles are scored: every query, or those on the dataset's
    fixed list (docs/methods/presentations.md; the first-stage pass still covers every query)."""
    if protocol.shuffle_queries is None:
        return frozenset(qids)
    listed = set(protocol.shuffle_queries.ids())
    have = [q for q in qids if q in listed]
    if not have and "random_shuffle" in protocol.perturbations:
        raise InvalidInput(
            f"{dataset}: none of the {len(qids)} queries is on shuffle list {protocol.shuffle_queries.name!r} "
            f"({protocol.shuffle_queries.file}); the query ids of the candidates and the list differ"
        )
    log.info("%s: random shuffles on %d of %d queries (list %s, %d ids)", dataset, len(have), len(qids),
             protocol.shuffle_queries.name, len(listed))
    return frozenset(have)


def _grades_by_query(qrels: pl.DataFrame | None) -> dict[str, dict[str, int]]:
    grades: dict[str, dict[str, int]] = {}
    if qrels is not None:
        for qid, did, rel in qrels.select("query_id", "doc_id", "relevance").iter_rows():
            grades.setdefault(str(qid), {})[str(did)] = int(rel)
    return grades


def _queries_without_injection(candidates: pl.DataFrame, qrels: pl.DataFrame | None,
                               grades_by_q: Mapping[str, Mapping[str, int]], protocol: Protocol,
                               dataset: str, n_queries: int) -> list[str]:
    """Queries that middle_injection skips: none of their candidates is relevant (said in the log)."""
    if "middle_injection" not in protocol.perturbations:
        return []
    if qrels is None:
        raise InvalidInput("perturbation middle_injection needs qrels (the strongest relevant document)")
    skipped = []
    for qid, dids in candidates.group_by("query_id").agg(pl.col("doc_id")).iter_rows():
        g = grades_by_q.get(qid, {})
        if not any(g.get(d, 0) >= 1 for d in dids):
            skipped.append(qid)
    skipped.sort()
    if skipped:
        log.warning(
            "%s: middle_injection skipped for %d of %d queries without a relevant candidate in qrels: %s",
            dataset, len(skipped), n_queries, ", ".join(skipped[:10]) + (" ..." if len(skipped) > 10 else ""),
        )
    return skipped


def _fingerprint(candidates: pl.DataFrame, qrels: pl.DataFrame | None, dataset: str, run: ScoringRun,
                 protocol: Protocol, scorer: Any) -> dict:
    """Everything a finished query's rows depend on: a resume reuses them only when it matches."""
    describe = scorer.describe() if hasattr(scorer, "describe") else {"scorer": getattr(scorer, "name", "?")}
    return {
        "presdep_version": __version__,
        "dataset": dataset,
        "variant": run.as_dict(),
        "protocol": protocol.as_dict(),
        "scorer": describe,
        "template_sha256": getattr(scorer, "template_sha256", None),
        "candidates_sha256": _sha256_frame(candidates.select(*CANDIDATE_COLUMNS).sort("query_id", "first_stage_rank")),
        "qrels_sha256": _sha256_frame(qrels.select("query_id", "doc_id", "relevance").sort("query_id", "doc_id")) if qrels is not None else None,
    }


# Prompts of consecutive queries a scorer that batches by itself reads in one call: its
# batches then span queries (sorted by length, cut by its token budget). Without a read cache
# a killed job repeats at most this window; with one, at most the batch in flight.
CROSS_QUERY_PROMPTS = 512


def batches_across_queries(scorer: Any) -> bool:
    """A scorer that cuts its own batches (``plan_batches``) gets many queries' prompts per call."""
    return hasattr(scorer, "plan_batches") and not getattr(scorer, "first_stage", False)


def _windows(plans: Sequence[QueryPlan], across: bool) -> list[list[QueryPlan]]:
    """Consecutive queries read together: up to CROSS_QUERY_PROMPTS prompts, or one query each."""
    out: list[list[QueryPlan]] = []
    size = CROSS_QUERY_PROMPTS
    for plan in plans:
        if out and across and sum(len(x.layout) for x in out[-1]) + len(plan.layout) <= size:
            out[-1].append(plan)
        else:
            out.append([plan])
    return out


def _read_window(window: Sequence[QueryPlan], scorer: Any) -> list[list[Any]]:
    """Each query's readouts (layout order): one scorer call for the whole window, split back."""
    if getattr(scorer, "first_stage", False):
        return [[scorer.score_ranked([w.ranks[i] for i in idx], len(w.doc_ids)) for *_, idx in w.layout]
                for w in window]
    prompts = [pr for w in window for pr in w.prompts]
    readouts = scorer.score_prompts(prompts)
    if len(readouts) != len(prompts):
        raise RuntimeError(f"scorer {scorer.name} returned {len(readouts)} prompts for {len(prompts)}")
    out, at = [], 0
    for w in window:
        out.append(readouts[at : at + len(w.layout)])
        at += len(w.layout)
    return out


def _score_missing_queries(candidates: pl.DataFrame, qids: Sequence[str], grades_by_q: Mapping[str, Mapping[str, int]],
                           partial: Path, dataset: str, v: Variant, p: Protocol, scorer: Any,
                           shuffled: frozenset[str], cache: Any = None) -> set[str]:
    """Score every query not yet in the resume folder, one atomic file per query; returns the ones found done.

    A scorer that cuts its own batches reads consecutive queries' prompts in one call
    (:func:`_windows`), so a batch never waits for one query's few prompts. Progress is a bar
    in prompts (of every presentation of every query), moved per batch the scorer reads (and
    per prompt it answers from the read cache or another job's read) where it reports them
    (``on_progress``), else per window; see :class:`presdep.scoring.score_progress.Progress`."""
    groups = {qid: g for (qid,), g in candidates.group_by("query_id", maintain_order=True)}
    done = {q for q in qids if (partial / _partial_name(q)).exists()}
    if done:
        log.info("%s: resuming, %d of %d queries already scored", dataset, len(done), len(qids))

    def grades_of(qid: str) -> Mapping[str, int] | None:
        return grades_by_q.get(qid) if "middle_injection" in p.perturbations else None

    plans = {qid: plan_query(qid, groups[qid], grades_of(qid), dataset, v, p, qid in shuffled) for qid in qids}
    prompts = {qid: _query_prompts(plans[qid], p, scorer, qid in shuffled) for qid in qids}
    hook = hasattr(scorer, "on_progress")
    todo = [plans[q] for q in qids if q not in done]
    with Progress(sum(prompts.values()), sum(prompts[q] for q in done), f"score {dataset}") as bar:
        if hook:
            scorer.on_progress = bar.add
        try:
            for window in _windows(todo, batches_across_queries(scorer)):
                bar.start_query(sum(prompts[w.qid] for w in window))
                for plan, readouts in zip(window, _read_window(window, scorer)):
                    qid = plan.qid
                    df = finish_query(plan, readouts, p, scorer, qid in shuffled)
                    if cache is not None:  # journaled before the query counts as done
                        cache.checkpoint()
                    if hasattr(scorer, "take_stats"):  # per-query counts (e.g. parse failures) survive a resume
                        stats = json.dumps(scorer.take_stats(), sort_keys=True)
                        write_text_atomic(partial / (_partial_name(qid) + ".stats.json"), stats)
                    _write_ipc_atomic(df, partial / _partial_name(qid))
                bar.end_query()
        finally:
            if hook:
                scorer.on_progress = None
    return done


def _query_prompts(plan: QueryPlan, p: Protocol, scorer: Any, shuffled: bool) -> int:
    """How many prompts scoring one query takes (as finish_query lays them out, noise re-reads included)."""
    count = len(plan.layout)
    if shuffled and measures_noise(scorer, p):
        count += p.noise_rereads * len(chunk_positions(len(plan.doc_ids), p.B, plan.orders[0][3]))
    return count


def _write_scores(qids: Sequence[str], partial: Path, out_path: Path, dataset: str, run: ScoringRun, p: Protocol,
                  scorer: Any, fingerprint: Mapping[str, Any], skipped: list[str], cache: Any,
                  shuffled: frozenset[str]) -> None:
    """The scores contract from the per-query files, with the run's provenance in its metadata."""
    v = run.variant
    frames = [pl.read_ipc(partial / _partial_name(q)) for q in qids]
    scorer_stats: dict[str, int] = {}
    for q in qids:
        sp = partial / (_partial_name(q) + ".stats.json")
        for k, n in (json.loads(sp.read_text()) if sp.exists() else {}).items():
            scorer_stats[k] = scorer_stats.get(k, 0) + int(n)
    scores = pl.concat(frames).sort("perturbation", "presentation", "query_id", "position")
    describe = fingerprint["scorer"]
    counts = {x: (shuffle_count(v, p) if x == "random_shuffle" else p.M if x == "within_chunk" else len(INJECTION_PLACES))
              for x in p.perturbations}
    noise = measures_noise(scorer, p) and bool(shuffled)
    if noise:
        counts[BATCH_NOISE] = p.noise_rereads
    elif p.noise_rereads:
        log.warning("%s: protocol.noise_rereads = %d, but scorer %s reads no batches: no noise floor measured",
                    dataset, p.noise_rereads, getattr(scorer, "name", "?"))
    write_table(
        scores, out_path, "scores",
        params={"variant": fingerprint["variant"], "protocol": fingerprint["protocol"]},
        dataset=dataset,
        perturbations=[FIRST_STAGE, *p.perturbations, *([BATCH_NOISE] if noise else [])],
        presentations={FIRST_STAGE: 1, **counts},
        bsc_k=v.bsc_k,
        bsc_ensembles=v.bsc_ensembles,  # E: used by the views only when bsc_k > 1
        template_sha256=fingerprint["template_sha256"],
        model=describe.get("model"),
        scorer=describe,
        dtype=describe.get("dtype"),  # part of every score's identity (auto resolves per processor)
        middle_injection_skipped=skipped,
        shuffle_rule=p.shuffle_rule,
        chunking=v.chunking,  # of every pass, shuffles included
        shuffle_queries={"list": p.shuffle_queries.as_dict() if p.shuffle_queries else None,
                         "queries": len(shuffled), "of": len(qids)},
        scorer_stats=scorer_stats or None,
        batch_noise={"rereads": p.noise_rereads, "measured": noise,
                     "batch_size": getattr(scorer, "batch_size", None)} if p.noise_rereads else None,
        # Which identity's entries the scores are; not the counters (the profile has those), so the
        # file depends on its inputs alone, not on what earlier or concurrent jobs read.
        **({"read_cache": cache.provenance()} if cache is not None else {}),
    )


def _profile(scorer: Any, cache: Any, *, dataset: str, queries: int, resumed: int, startup_s: float | None,
             load_s: float, total_s: float) -> dict:
    """Where a score job's time went (read by benchmarks/default_profile.py from the job log)."""
    forward = getattr(getattr(scorer, "forward", None), "seconds", None)
    tokens = getattr(scorer, "tokens_read", None)
    load_s += getattr(getattr(scorer, "load", None), "seconds", 0.0)  # weights loaded on the first cache miss
    out = {
        "dataset": dataset, "scorer": getattr(scorer, "name", "?"), "queries": queries, "queries_resumed": resumed,
        "dtype": getattr(scorer, "dtype_name", None),
        "prompts": getattr(scorer, "prompts_asked", None), "prompts_read": getattr(scorer, "prompts_read", None),
        # reads: prompts the model read (prompts_read, kept for older readers); distinct_prompts:
        # distinct prompts asked for; waited_for_other_job: missed in the cache, read by another job.
        "reads": getattr(scorer, "prompts_read", None), "distinct_prompts": getattr(scorer, "distinct_prompts", None),
        "waited_for_other_job": getattr(scorer, "waited_for_other_job", None),
        "tokens_read": tokens, "startup_s": startup_s, "model_load_s": load_s, "forward_s": forward,
        "tokens_per_s": (tokens / forward) if tokens and forward else None, "score_dataset_s": total_s,
        "model_loaded": getattr(scorer, "model_loaded", None),
    }
    if cache is not None:
        stats = cache.stats()
        out.update(cache_hits=cache.hits, cache_misses=cache.misses, cache_hit_rate=stats["hit_rate"],
                   cache_quarantined_shards=stats["quarantined_shards"],
                   cache_quarantined_entries=stats["quarantined_entries"],
                   claims_taken_over=getattr(cache, "claims_taken_over", None))
    return out


__all__ = ["FIRST_STAGE", "score_dataset", "shuffle_count"]
