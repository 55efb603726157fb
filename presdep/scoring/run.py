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
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from presdep import __version__
from presdep.config.records import Protocol, ScoringRun, Variant
from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import (
    INJECTION_PLACES,
    NoRelevantDocument,
    chunk_positions,
    middle_injection,
    shuffle_order,
    stable_seed,
    within_chunk,
)
from presdep.contracts.schemas import SCHEMAS, atomic_write, write_table, write_text_atomic
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import BATCH_NOISE
from presdep.runtime import logs
from presdep.runtime.resume import partial_dir, resume_dir
from presdep.scoring.factory import make_scorer
from presdep.scoring.template import prepare_doc

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


def shuffle_count(v: Variant, p: Protocol) -> int:
    """Random shuffles scored per query: M, or E*K for a BSC variant (its views need them all)."""
    return p.M if v.bsc_k == 1 else v.bsc_ensembles * v.bsc_k


def _orders_for_query(
    qid: str, n: int, grades: Mapping[str, int] | None, doc_ids: Sequence[str],
    dataset: str, v: Variant, p: Protocol, shuffled: bool = True,
) -> list[tuple[str, int, list[int], str]]:
    """Every presentation of one query: (perturbation, presentation, order as indices into
    first-stage order, chunking). Every pass is cut by the variant's chunking: the
    round-robin row deals the first-stage order and each shuffle round-robin
    (docs/methods/variants.md). ``shuffled`` False: the query is not on the dataset's shuffle list, so it gets
    the first-stage pass and no random shuffles."""
    base = list(range(n))
    seed, b = p.seed, p.B
    out: list[tuple[str, int, list[int], str]] = [(FIRST_STAGE, 0, base, v.chunking)]
    for pert in p.perturbations:
        if pert == "random_shuffle":
            if not shuffled:
                continue
            for m in range(shuffle_count(v, p)):
                order = shuffle_order(n, m, p.shuffle_rule, base_seed=seed, dataset=dataset, query_id=qid)
                out.append((pert, m, order, v.chunking))
        elif pert == "within_chunk":
            for m in range(p.M):
                s = stable_seed(seed, dataset, qid, "within_chunk", m)
                out.append((pert, m, within_chunk(base, b, s, v.chunking), v.chunking))
        elif pert == "middle_injection":
            if grades is None:
                continue
            try:
                injected = middle_injection(list(doc_ids), grades)  # ties by doc id, not index
            except NoRelevantDocument:
                continue
            index = {d: i for i, d in enumerate(doc_ids)}
            for m, order in enumerate(injected):
                out.append((pert, m, [index[d] for d in order], v.chunking))
    return out


def _score_query(
    qid: str, group: pl.DataFrame, grades: Mapping[str, int] | None,
    dataset: str, v: Variant, p: Protocol, scorer: Any, shuffled: bool = True,
) -> pl.DataFrame:
    """One query's rows: one single-pass readout per document per presentation."""
    group = group.sort("first_stage_rank")
    doc_ids = group["doc_id"].to_list()
    ranks = group["first_stage_rank"].to_list()
    query = group["query"][0]
    docs = [prepare_doc(t, p.max_doc_chars) for t in group["doc"].to_list()]
    n = len(doc_ids)
    orders = _orders_for_query(qid, n, grades, doc_ids, dataset, v, p, shuffled)

    # Every prompt of every presentation: (presentation index, prompt, positions, doc indices).
    layout: list[tuple[int, int, list[int], list[int]]] = []
    for ui, (_, _, order, chunking) in enumerate(orders):
        for j, pos in enumerate(chunk_positions(n, p.B, chunking)):
            layout.append((ui, j, pos, [order[x] for x in pos]))

    if getattr(scorer, "first_stage", False):
        readouts = [scorer.score_ranked([ranks[i] for i in idx], n) for *_, idx in layout]
    else:
        readouts = scorer.score_prompts([(query, [docs[i] for i in idx]) for *_, idx in layout])
    if len(readouts) != len(layout):
        raise RuntimeError(f"scorer {scorer.name} returned {len(readouts)} prompts for {len(layout)}")
    if shuffled and measures_noise(scorer, p):
        orders, layout, readouts = _with_noise_rereads(qid, query, docs, orders, layout, readouts, p, scorer)

    n_units = len(orders)
    score = np.full((n_units, n), np.nan)
    probs = np.full((n_units, n, 4), np.nan)
    where = np.full((n_units, 3, n), -1, dtype=np.int64)  # position, prompt, slot
    has_probs = True
    for (ui, j, pos, idx), ro in zip(layout, readouts):
        if len(ro) != len(idx):
            raise RuntimeError(f"scorer {scorer.name} returned {len(ro)} readouts for {len(idx)} documents")
        if all(r.probs is not None for r in ro):
            probs[ui, idx] = np.asarray([r.probs for r in ro], dtype=np.float64)
        else:
            has_probs = False
        score[ui, idx] = [r.score for r in ro]
        for s, (d, x) in enumerate(zip(idx, pos)):
            where[ui, :, d] = (x, j, s)

    frames = []
    for ui, (pert, m, _, _) in enumerate(orders):
        cols: dict[str, Any] = {
            "query_id": [qid] * n,
            "doc_id": doc_ids,
            "perturbation": [pert] * n,
            "presentation": np.full(n, m, dtype=np.int32),
            "position": where[ui, 0].astype(np.int32),
            "prompt": where[ui, 1].astype(np.int32),
            "slot": where[ui, 2].astype(np.int32),
            "score": score[ui].astype(np.float64),
        }
        for g in range(4):
            cols[f"p{g}"] = (probs[ui, :, g].astype(np.float32) if has_probs
                             else pl.Series(f"p{g}", [None] * n, dtype=pl.Float32))
        frames.append(pl.DataFrame(cols))
    out = pl.concat(frames).select(_SCORE_COLS)
    if (out["position"] < 0).any() or out["score"].is_nan().any():
        raise RuntimeError(f"query {qid!r}: a document was not scored in some presentation")
    return out


def measures_noise(scorer: Any, p: Protocol) -> bool:
    """Whether this job re-reads the first-stage presentation (protocol.noise_rereads >= 2 and a
    scorer that batches prompts; the identity scorer and generative backends have no batch noise to read)."""
    return p.noise_rereads >= 2 and hasattr(scorer, "reread_in_batches")


def _with_noise_rereads(qid: str, query: str, docs: Sequence[str], orders: list, layout: list, readouts: list,
                        p: Protocol, scorer: Any) -> tuple[list, list, list]:
    """``orders``, ``layout`` and ``readouts`` extended by R re-reads of the first-stage presentation
    (perturbation batch_noise, presentations 0..R-1), each in other batch companions drawn from
    the query's own prompts (docs/methods/tau-psi.md#the-noise-floor-tau_psi_noise)."""
    targets = [entry for entry in layout if entry[0] == 0]  # the first-stage pass's prompts
    prompt = [(query, [docs[i] for i in idx]) for *_, idx in layout]
    target_prompts = [prompt[k] for k, entry in enumerate(layout) if entry[0] == 0]
    companions = [prompt[k] for k, entry in enumerate(layout) if entry[0] != 0]
    rereads = scorer.reread_in_batches(target_prompts, companions, p.noise_rereads,
                                       seed=stable_seed(p.seed, "batch_noise", qid))
    orders = list(orders)
    layout = list(layout)
    readouts = list(readouts)
    first = orders[0]
    for r, reads in enumerate(rereads):
        ui = len(orders)
        orders.append((BATCH_NOISE, r, first[2], first[3]))
        for (_, j, pos, idx), ro in zip(targets, reads):
            layout.append((ui, j, pos, idx))
            readouts.append(ro)
    return orders, layout, readouts


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
    ``read_cache``: the read cache's folder, used by scorers that support it (hits and
    misses go into the metadata). Returns the job's profile (also logged as one
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
    if read_cache is not None and hasattr(scorer, "use_read_cache"):
        cache = scorer.use_read_cache(read_cache)
        log.info("%s: read cache %s (%d entries for this identity)", dataset, cache.dir, len(cache))
    qids = candidates["query_id"].unique(maintain_order=True).to_list()
    grades_by_q = _grades_by_query(qrels)
    skipped = _queries_without_injection(candidates, qrels, grades_by_q, protocol, dataset, len(qids))
    fingerprint = _fingerprint(candidates, qrels, dataset, run, protocol, scorer)
    partial = resume_dir(partial_dir(out_path), json.dumps(fingerprint, sort_keys=True, default=str))
    shuffled = shuffled_queries(qids, protocol, dataset)
    done = _score_missing_queries(candidates, qids, grades_by_q, partial, dataset, run.variant, protocol, scorer,
                                  shuffled)
    if cache is not None:
        cache.compact_written()
    _write_scores(qids, partial, out_path, dataset, run, protocol, scorer, fingerprint, skipped, cache, len(done),
                  shuffled)
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


def _score_missing_queries(candidates: pl.DataFrame, qids: Sequence[str], grades_by_q: Mapping[str, Mapping[str, int]],
                           partial: Path, dataset: str, v: Variant, p: Protocol, scorer: Any,
                           shuffled: frozenset[str]) -> set[str]:
    """Score every query not yet in the resume folder, one atomic file per query; returns the ones found done.

    Progress is a bar in prompts (of every presentation of every query), moved per batch
    the scorer reads (and per prompt it answers from the read cache or another job's read)
    where it reports them (``on_progress``), else per query; see :class:`_Progress`."""
    groups = {qid: g for (qid,), g in candidates.group_by("query_id", maintain_order=True)}
    done = {q for q in qids if (partial / _partial_name(q)).exists()}
    if done:
        log.info("%s: resuming, %d of %d queries already scored", dataset, len(done), len(qids))

    def grades_of(qid: str) -> Mapping[str, int] | None:
        return grades_by_q.get(qid) if "middle_injection" in p.perturbations else None

    prompts = {qid: _query_prompts(qid, groups[qid], grades_of(qid), dataset, v, p, scorer, qid in shuffled)
               for qid in qids}
    hook = hasattr(scorer, "on_progress")
    with _Progress(sum(prompts.values()), sum(prompts[q] for q in done), f"score {dataset}") as bar:
        if hook:
            scorer.on_progress = bar.add
        try:
            for qid in qids:
                if qid in done:
                    continue
                bar.start_query(prompts[qid])
                df = _score_query(qid, groups[qid], grades_of(qid), dataset, v, p, scorer, qid in shuffled)
                if hasattr(scorer, "take_stats"):  # per-query counts (e.g. parse failures) survive a resume
                    stats = json.dumps(scorer.take_stats(), sort_keys=True)
                    write_text_atomic(partial / (_partial_name(qid) + ".stats.json"), stats)
                _write_ipc_atomic(df, partial / _partial_name(qid))
                bar.end_query()
        finally:
            if hook:
                scorer.on_progress = None
    return done


def _query_prompts(qid: str, group: pl.DataFrame, grades: Mapping[str, int] | None, dataset: str, v: Variant,
                   p: Protocol, scorer: Any, shuffled: bool) -> int:
    """How many prompts scoring one query takes (as _score_query lays them out, noise re-reads included)."""
    doc_ids = group.sort("first_stage_rank")["doc_id"].to_list()
    n = len(doc_ids)
    orders = _orders_for_query(qid, n, grades, doc_ids, dataset, v, p, shuffled)
    count = sum(len(chunk_positions(n, p.B, chunking)) for *_, chunking in orders)
    if shuffled and measures_noise(scorer, p):
        count += p.noise_rereads * len(chunk_positions(n, p.B, orders[0][3]))
    return count


# The bar is drawn this many times per progress line: a job's log and console get one line
# every presdep.runtime.logs.PROGRESS_EVERY_S seconds (ProgressStream keeps one draw per
# interval), and a terminal sees the bar move in between.
PROGRESS_DRAWS_PER_LINE = 10


class _Progress:
    """A score job's bar in prompts done of total, with the tokens read, the rate and the time left.

    Drawn at most and (by a heartbeat thread, while a batch is read, the weights load or
    another job's read is awaited) at least every ``PROGRESS_EVERY_S / PROGRESS_DRAWS_PER_LINE``
    seconds, so that :class:`presdep.runtime.logs.ProgressStream` writes a line every
    ``PROGRESS_EVERY_S`` (30 s): the first when the bar opens, in the log at once and on the
    console once the job has run that long. A query's prompts move the bar by at most its
    own count (a scorer's noise re-reads hold companions too), topped up when it is done.
    """

    def __init__(self, total: int, initial: int, desc: str):
        self._every = max(float(logs.PROGRESS_EVERY_S) / PROGRESS_DRAWS_PER_LINE, 0.001)
        self._lock = threading.Lock()
        self.tokens = 0
        self._t0 = time.perf_counter()
        self._left = 0  # of the current query's prompts, not reported yet
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="prompt", mininterval=self._every,
                        miniters=1, postfix=self._postfix())
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="score progress", daemon=True)
        self._beat.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        self._beat.join()
        with self._lock:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.close()
        return False

    def _postfix(self) -> str:
        elapsed = time.perf_counter() - self._t0
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        return f"{self.tokens:,} tokens, {rate:,.0f} tok/s"

    def start_query(self, prompts: int) -> None:
        self._left = prompts

    def add(self, prompts: int, tokens: int = 0) -> None:
        """``prompts`` done (read, or answered without a read) and ``tokens`` read by the model."""
        with self._lock:
            self.tokens += tokens
            step = min(prompts, self._left)
            self._left -= step
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.update(step)

    def end_query(self) -> None:
        if self._left:
            self.add(self._left)

    def _heartbeat(self) -> None:
        beat = 0.0  # when this thread last drew the bar (tqdm's last_print_t says when update() did)
        while not self._stop.wait(self._every):
            with self._lock:
                now = self.bar._time()
                if now - max(self.bar.last_print_t, beat) < self._every:
                    continue
                # Not in the middle of a log record the main thread is writing to the same stream.
                handlers = logging.getLogger().handlers
                for h in handlers:
                    h.acquire()
                try:
                    self.bar.set_postfix_str(self._postfix(), refresh=False)
                    self.bar.refresh()  # the same counts and rate, a later elapsed time
                finally:
                    for h in reversed(handlers):
                        h.release()
                beat = now


def _write_scores(qids: Sequence[str], partial: Path, out_path: Path, dataset: str, run: ScoringRun, p: Protocol,
                  scorer: Any, fingerprint: Mapping[str, Any], skipped: list[str], cache: Any, resumed: int,
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
        **({"read_cache": {**cache.stats(), "queries_resumed": resumed}} if cache is not None else {}),
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
        out.update(cache_hits=cache.hits, cache_misses=cache.misses, cache_hit_rate=cache.stats()["hit_rate"],
                   claims_taken_over=getattr(cache, "claims_taken_over", None))
    return out


__all__ = ["FIRST_STAGE", "score_dataset", "shuffle_count"]
