"""Silver labels: teacher scores of the training queries under T shuffled presentations.

docs/methods/training.md: the teacher reads each training query under T shuffles
(t = 0..T-1); shuffle t is a Fisher-Yates permutation of the query's whole
candidate list seeded by ``stable_seed(seed, dataset, query_id, "teacher", t)``
(the evaluation shuffles' stable seeding, tagged ``"teacher"`` so the teacher's
presentations are disjoint from the evaluation presentations), cut into
contiguous prompts of B. The ``silver`` table holds one row per (query, doc,
shuffle) with the teacher's ``score`` and two labels, repeated on each of a
document's rows:

- ``label_k1``: the score under shuffle 0 (the k1 label of single-order,
  permutation augmentation, DebiasFirst and OC-SFT); null when that prompt failed;
- ``label``: the mean of the document's non-null scores over the T shuffles
  (the k10 label of order-averaged training when T = 10); null when all failed.

Teachers: ``open_weight`` (the expected-grade readout of a model, through the
scoring package's ``transformers`` scorer) or ``hosted`` (integer grades from a
chat endpoint, :mod:`presdep.training.hosted`). A hosted job whose failures exceed
the configured shares raises before anything is written (:func:`failure_gate`);
the parse failures it tolerates are counted in the output metadata.

Reading and resuming (:mod:`presdep.training.silver_partial`): prompts are read in
batches of similar length (longest first, cut by a prompt count and a budget of the
open-weight teacher's prompt tokens, or of characters for a hosted teacher); scores are mapped back to the prompts' own order, so the table does not
depend on the batching. The job flushes each finished batch to ``<out>.partial/``
(one Arrow IPC file per batch, written atomically after a record of its sha256, under a
fingerprint of the inputs, the settings and the open-weight teacher's files by content), so a
job killed at any point repeats at most the batch in flight (a batch file that fails its
checks on resume is read again, and a teacher replaced at the same path discards the
folder); the final file is assembled from the batch files, written atomically, equals
an uninterrupted run's byte for byte (for a hosted teacher, its ``usage`` counts say
which replies came from the reply cache), and the folder is then removed. A hosted
job stopped by the failure gate keeps its batches without failures and drops the
others, so a re-run asks only those again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from tqdm.auto import tqdm

from presdep import __version__, scoring
from presdep.config.records import TEACHER_KINDS, PromptSettings, Protocol, ScoringRun, Teacher, Variant, thaw
from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import chunk_positions, random_shuffle, stable_seed
from presdep.contracts.schemas import content_digest, read_table, write_table
from presdep.runtime.model_digest import model_digest, write_memo
from presdep.runtime.resume import partial_dir, resume_dir
from presdep.scoring.template import prepare_doc
from presdep.training import silver_partial as sp

log = logging.getLogger(__name__)

# (query, docs) prompts -> per prompt a list of scores (None = failed prompt)
PromptScorer = Callable[[Sequence[tuple[str, Sequence[str]]]], list[list[float] | None]]

CANDIDATE_COLUMNS = ("query_id", "query", "doc_id", "doc", "first_stage_rank")


def teacher_orders(n: int, *, seed: int, dataset: str, query_id: str, T: int) -> list[list[int]]:
    """Shuffles 0..T-1 of a query (indices into the first-stage order)."""
    base = list(range(n))
    return [random_shuffle(base, stable_seed(int(seed), dataset, str(query_id), "teacher", t)) for t in range(T)]


def silver_prompts(candidates: pl.DataFrame, *, dataset: str, T: int, B: int, seed: int,
                   max_doc_chars: int | None) -> tuple[list[tuple[str, int, list[str]]], list[tuple[str, list[str]]]]:
    """(layout, prompts): per prompt its (query id, shuffle, doc ids) and its (query, prepared docs)."""
    if T < 1:
        raise InvalidInput(f"T must be >= 1, got {T}")
    layout: list[tuple[str, int, list[str]]] = []
    prompts: list[tuple[str, list[str]]] = []
    order = candidates.sort("query_id", "first_stage_rank")
    for (qid,), g in order.group_by("query_id", maintain_order=True):
        ids, query = g["doc_id"].to_list(), g["query"][0]
        docs = [prepare_doc(d, max_doc_chars) for d in g["doc"].to_list()]
        for t, pres in enumerate(teacher_orders(len(ids), seed=seed, dataset=dataset, query_id=qid, T=T)):
            for pos in chunk_positions(len(pres), B, "contiguous"):
                idx = [pres[p] for p in pos]
                layout.append((str(qid), t, [ids[i] for i in idx]))
                prompts.append((query, [docs[i] for i in idx]))
    return layout, prompts


# (query, docs) -> the prompt's length in tokens, from the teacher's own tokenizer and template
PromptTokens = Callable[[str, Sequence[str]], int]


def silver_batches(prompts: Sequence[tuple[str, Sequence[str]]], *, batch_prompts: int = sp.BATCH_PROMPTS,
                   batch_chars: int = sp.BATCH_CHARS, prompt_tokens: PromptTokens | None = None,
                   batch_tokens: int = sp.BATCH_TOKENS) -> list[list[int]]:
    """The job's batch plan: prompt indices, by length (see :func:`silver_partial.plan_batches`):
    in tokens with ``prompt_tokens`` (cut at ``batch_tokens``), else in characters (``batch_chars``)."""
    if prompt_tokens is not None:
        return sp.plan_batches([int(prompt_tokens(q, d)) for q, d in prompts], max_prompts=batch_prompts,
                               max_chars=batch_tokens)
    return sp.plan_batches([sp.prompt_chars(q, d) for q, d in prompts], max_prompts=batch_prompts,
                           max_chars=batch_chars)


def _batch_rows(batch: Sequence[int], layout: Sequence[tuple[str, int, list[str]]],
                results: Sequence[list[float] | None] | None) -> pl.DataFrame:
    """The batch's rows (prompt index, query, doc, shuffle, score); scores null without ``results``."""
    rows: dict[str, list] = {"prompt": [], "query_id": [], "doc_id": [], "presentation": [], "score": []}
    for j, p in enumerate(batch):
        qid, t, ids = layout[p]
        res = None if results is None else results[j]
        if res is not None and len(res) != len(ids):
            raise RuntimeError(f"teacher returned {len(res)} scores for a prompt of {len(ids)} documents")
        for k, d in enumerate(ids):
            rows["prompt"].append(p)
            rows["query_id"].append(qid)
            rows["doc_id"].append(d)
            rows["presentation"].append(t)
            rows["score"].append(None if res is None else float(res[k]))
    return pl.DataFrame(rows, schema=sp.ROW_SCHEMA)


def label_batches(candidates: pl.DataFrame, score_prompts: PromptScorer, *, teacher: str, dataset: str, T: int,
                  B: int, seed: int, max_doc_chars: int | None, batch_prompts: int = sp.BATCH_PROMPTS,
                  batch_chars: int = sp.BATCH_CHARS, partial: Path | None = None,
                  take_stats: Callable[[], dict] | None = None, prompt_tokens: PromptTokens | None = None,
                  batch_tokens: int = sp.BATCH_TOKENS) -> tuple[pl.DataFrame, list[dict | None]]:
    """The ``silver`` table and each batch's stats (``take_stats()`` after the batch; None without it).

    With ``partial`` (a folder from :func:`presdep.runtime.resume.resume_dir`), batches found
    there are not read again and each batch read is flushed there; the table is then
    assembled from the folder's files, so a resumed and an uninterrupted run agree.
    """
    layout, prompts = silver_prompts(candidates, dataset=dataset, T=T, B=B, seed=seed, max_doc_chars=max_doc_chars)
    plan = silver_batches(prompts, batch_prompts=batch_prompts, batch_chars=batch_chars, prompt_tokens=prompt_tokens,
                          batch_tokens=batch_tokens)
    resumed: dict[int, tuple[pl.DataFrame, dict | None]] = {}
    if partial is not None:  # checked first, so the count below holds only whole batches
        for k in sorted(sp.done_batches(partial, len(plan))):
            got = sp.resumed_batch(partial, k, _batch_rows(plan[k], layout, None))
            if got is not None:
                resumed[k] = got
    n_done = sum(len(plan[k]) for k in resumed)
    if resumed:
        log.info("silver %s/%s: resuming from %s: %d of %d batches (%d of %d prompts) already read",
                 teacher, dataset, partial, len(resumed), len(plan), n_done, len(prompts))
    frames: list[pl.DataFrame] = []
    stats: list[dict | None] = []
    with tqdm(total=len(prompts), initial=n_done, desc=f"silver {teacher} {dataset}", unit="prompt") as bar:
        for k, batch in enumerate(plan):
            if k in resumed:
                frames.append(resumed[k][0])
                stats.append(resumed[k][1])
                continue
            results = score_prompts([prompts[p] for p in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"teacher returned {len(results)} results for {len(batch)} prompts")
            rows = _batch_rows(batch, layout, results)
            stats.append(take_stats() if take_stats is not None else None)
            if partial is not None:
                rows = sp.write_batch(partial, k, rows, stats[-1])  # as read back: resumed or not, the same frames
            frames.append(rows)
            bar.update(len(batch))
    return _silver_table(frames, teacher), stats


def _silver_table(frames: list[pl.DataFrame], teacher: str) -> pl.DataFrame:
    # Back in prompt order (a stable sort: slots stay in order), so the labels' sums run
    # over the same rows in the same order whatever the batching.
    df = (pl.concat(frames) if frames else pl.DataFrame(schema=sp.ROW_SCHEMA)).sort("prompt", maintain_order=True)
    df = df.drop("prompt")
    labels = df.group_by("query_id", "doc_id").agg(
        pl.col("score").filter(pl.col("presentation") == 0).first().alias("label_k1"),
        pl.col("score").drop_nulls().mean().alias("label"),
    )
    return (
        df.join(labels, on=["query_id", "doc_id"], how="left")
        .with_columns(pl.lit(teacher).alias("teacher"))
        .select("query_id", "doc_id", "teacher", "presentation", "score", "label_k1", "label")
        .sort("query_id", "presentation", "doc_id")
        .rechunk()
    )


def silver_labels(
    candidates: pl.DataFrame,
    score_prompts: PromptScorer,
    *,
    teacher: str,
    dataset: str,
    T: int,
    B: int,
    seed: int,
    max_doc_chars: int | None,
    batch_prompts: int = sp.BATCH_PROMPTS,
    batch_chars: int = sp.BATCH_CHARS,
    partial: Path | None = None,
) -> pl.DataFrame:
    """The ``silver`` table (query_id, doc_id, teacher, presentation, score, label_k1, label).

    The teacher gets the prompts in length-sorted batches of at most ``batch_prompts`` prompts
    and ``batch_chars`` characters (:func:`silver_batches`); with ``partial`` the batches are
    flushed there and the ones found there are not read again (see :func:`label_batches`).
    """
    return label_batches(candidates, score_prompts, teacher=teacher, dataset=dataset, T=T, B=B, seed=seed,
                         max_doc_chars=max_doc_chars, batch_prompts=batch_prompts, batch_chars=batch_chars,
                         partial=partial)[0]


def open_weight_prompt_scorer(scorer: Any) -> PromptScorer:
    """Adapt a :class:`presdep.scoring.Scorer` (``score_prompts`` -> GradeReadouts)."""

    def run(prompts):
        return [[r.score for r in ro] for ro in scorer.score_prompts(prompts)]

    return run


def make_open_weight_scorer(model_dir: str | os.PathLike, *, max_doc_chars: int | None, device: str = "auto",
                            dtype: str = "auto", batch_prompts: int = 8, rubric: str | None = None,
                            instruction: str | None = None) -> Any:
    """The teacher readout: the scoring package's ``transformers`` scorer on the model directory.

    No fallback: a missing backend or a model that does not load is an error naming what was asked.
    """
    if "transformers" not in scoring.REGISTRY:
        raise RuntimeError(f"open-weight teacher on {model_dir}: the scoring package registers no 'transformers' "
                           f"scorer (registered: {sorted(scoring.REGISTRY)})")
    # One prompt at a time through the plain readout: no chunking, BSC or calibration of its own.
    readout = Variant.checked({"scorer": "transformers", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
                               "bsc_ensembles": 1, "device": device, "dtype": dtype, "batch_size": int(batch_prompts)},
                              name="teacher")
    return scoring.make_scorer(
        ScoringRun(variant=readout, model={"source": "local", "path": str(model_dir)}),
        PromptSettings(max_doc_chars=max_doc_chars, instruction=instruction, rubric=rubric),
    )


def silver_fingerprint(candidates: pl.DataFrame, meta: dict, protocol: Protocol, *, batch_prompts: int,
                       batch_chars: int, batch_tokens: int | None = None, teacher_files: dict | None = None) -> str:
    """Everything the reads of a job depend on: a resume folder is reused only when it matches.

    ``teacher_files`` names an open-weight teacher by content (:func:`teacher_identity`), so a
    model replaced at the same path never resumes onto the batches of the one before."""
    missing = [c for c in CANDIDATE_COLUMNS if c not in candidates.columns]
    if missing:
        raise InvalidInput(f"candidates lack the column(s) {missing}; have {candidates.columns}")
    cand = candidates.select(*CANDIDATE_COLUMNS).sort("query_id", "first_stage_rank")
    fp = {
        "presdep_version": __version__,
        "candidates_sha256": content_digest(cand, b"silver candidates"),
        **{k: meta.get(k) for k in ("teacher", "teacher_kind", "dataset", "T", "B", "seed", "teacher_spec",
                                    "readout", "template_sha256", "mock")},
        "max_doc_chars": protocol.max_doc_chars, "rubric": protocol.rubric, "instruction": protocol.instruction,
        "batches": (sp.plan_settings(batch_prompts, batch_tokens, sp.TOKEN_RULE) if batch_tokens is not None
                    else sp.plan_settings(batch_prompts, batch_chars)),
        "batch_files": sp.BATCH_FILES,
        "teacher_files": teacher_files,
    }
    return json.dumps(fp, sort_keys=True, default=str)


# In the resume folder: the teacher folder's file stamp and digest, so a resumed job need not
# read multi-GB weights again to name its teacher (presdep.runtime.model_digest).
TEACHER_MEMO = "teacher-files.json"


def teacher_identity(model_dir: str | os.PathLike | None, scorer: Any, partial: Path) -> tuple[dict | None, dict | None]:
    """(identity, memo record): what names an open-weight teacher by content.

    The model folder's files digested (memoised in ``partial``), else the pin or weights hash a
    ready-made scorer knows (``model_identity``), else None (a stand-in scorer without files).
    A LoRA adapter's sha256 is in the scorer's description, which the fingerprint holds too."""
    if model_dir is not None:
        return model_digest(model_dir, partial / TEACHER_MEMO)
    ident = getattr(scorer, "model_identity", None)
    if ident is None:
        return None, None
    try:
        return dict(ident() if callable(ident) else ident), None
    except (InvalidInput, OSError) as exc:
        log.warning("silver: cannot name the teacher by content (%s); a model replaced at the same path "
                    "would resume onto the batches of the one before", exc)
        return None, None


def _other_teacher(old_fingerprint: str, files: dict | None, model_dir: Any) -> str | None:
    """'another teacher (...)' when the folder's fingerprint names other teacher files."""
    try:
        before = json.loads(old_fingerprint).get("teacher_files")
    except (ValueError, AttributeError):
        return None
    if not isinstance(before, dict) or not files or before == files:
        return None
    where = f"{model_dir}: " if model_dir is not None else ""
    return f"another teacher ({where}files {_short(before)} then, {_short(files)} now)"


def _short(identity: dict) -> str:
    digest = identity.get("files_sha256") or identity.get("weights_sha256")
    return f"sha256 {digest[:12]}..." if isinstance(digest, str) else json.dumps(identity, sort_keys=True)


def silver_labels_files(
    *,
    candidates_path: str | os.PathLike,
    out_path: str | os.PathLike,
    teacher: Teacher,
    dataset: str,
    protocol: Protocol,
    model_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    threads: int | None = None,
    scorer: Any = None,
    client: Any = None,
    batch_prompts: int | None = None,
    batch_chars: int = sp.BATCH_CHARS,
    batch_tokens: int = sp.BATCH_TOKENS,
) -> pl.DataFrame:
    """The ``silver_labels`` job: label a training dataset's candidates with one teacher.

    ``teacher`` is the teacher's record (its ``kind``, ``T`` and, for a hosted teacher,
    every endpoint setting in its spec); ``protocol`` is the training dataset's (B, seed,
    max_doc_chars, rubric, instruction). A hosted teacher whose failures exceed the
    configured shares raises :class:`presdep.training.hosted.HostedFailure` and
    writes nothing. Finished batches wait in ``<out_path>.partial/`` until the file is
    written, so a killed job resumes where it stopped (see the module docstring).
    """
    teacher_spec, kind, T = thaw(teacher.spec), teacher.kind, teacher.T
    # The teacher's setting (the config schema's default), unless the caller gives one.
    batch_prompts = int(batch_prompts or teacher_spec.get("batch_prompts") or sp.BATCH_PROMPTS)
    B, seed, max_doc_chars = protocol.B, protocol.seed, protocol.max_doc_chars
    rubric, instruction = protocol.rubric, protocol.instruction
    teacher = teacher.name
    out_path = Path(out_path)
    candidates = read_table(candidates_path, "candidates")
    meta: dict[str, Any] = {
        "teacher": teacher, "teacher_kind": kind, "dataset": dataset, "T": T, "B": B, "seed": seed,
        "presentations": "shuffles 0..T-1 seeded stable_seed(seed, dataset, query_id, 'teacher', t)",
        "labels": {"label_k1": "score under shuffle 0", "label": "mean of the non-null scores over shuffles 0..T-1"},
    }
    take_stats = grader = prompt_tokens = None
    if kind == "open_weight":
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        if scorer is None:
            if model_dir is None:
                raise InvalidInput(f"open-weight teacher {teacher!r} needs model_dir")
            scorer = make_open_weight_scorer(model_dir, max_doc_chars=max_doc_chars, device=teacher_spec["device"],
                                             rubric=rubric, instruction=instruction)
        run = open_weight_prompt_scorer(scorer)
        if callable(getattr(scorer, "build", None)):  # the readout's own prompt: batches sized in its tokens
            def prompt_tokens(query, docs):
                return len(scorer.build(query, list(docs)).ids)
        describe = scorer.describe() if hasattr(scorer, "describe") else {"scorer": getattr(scorer, "name", "?")}
        meta.update(teacher_spec={k: v for k, v in teacher_spec.items()}, readout=describe, mock=False,
                    template_sha256=getattr(scorer, "template_sha256", None))
    else:
        from presdep.training.hosted import HOSTED_OPTIONAL, HOSTED_REQUIRED, HostedGrader

        if cache_dir is None:
            raise InvalidInput(f"hosted teacher {teacher!r} needs a cache_dir")
        spec = {k: teacher_spec[k] for k in HOSTED_REQUIRED + HOSTED_OPTIONAL if k in teacher_spec}
        grader = HostedGrader(spec, cache_dir, max_doc_chars=max_doc_chars, client=client)

        def run(prompts):
            return [None if r.grades is None else [float(g) for g in r.grades]
                    for r in grader.grade_many(prompts, desc=f"silver {teacher}")]

        seen: dict = {}

        def take_stats() -> dict:
            # The batch's own counts: a resumed job sums them over every batch, read or resumed.
            now = grader.stats.as_dict()
            delta = sp.stats_delta(now, seen)
            seen.clear()
            seen.update(now)
            return delta

        meta.update(teacher_spec=grader.describe(), mock=grader.mock, template_sha256=grader.template.sha256)
    partial = partial_dir(out_path)
    files, memo = teacher_identity(model_dir, scorer, partial) if kind == "open_weight" else (None, None)
    fingerprint = silver_fingerprint(candidates, meta, protocol, batch_prompts=batch_prompts, batch_chars=batch_chars,
                                     batch_tokens=batch_tokens if prompt_tokens is not None else None,
                                     teacher_files=files)
    partial = resume_dir(partial, fingerprint, lambda old: _other_teacher(old, files, model_dir))
    if memo is not None:
        write_memo(partial / TEACHER_MEMO, memo)
    df, batch_stats = label_batches(candidates, run, teacher=teacher, dataset=dataset, T=T, B=B, seed=seed,
                                    max_doc_chars=max_doc_chars, batch_prompts=batch_prompts,
                                    batch_chars=batch_chars, partial=partial, take_stats=take_stats,
                                    prompt_tokens=prompt_tokens, batch_tokens=batch_tokens)
    if grader is not None:
        _hosted_gate(grader, batch_stats, meta, partial, teacher=teacher, dataset=dataset)
    n_null = int(df["score"].null_count())
    meta["null_scores"] = n_null
    write_table(df, out_path, "silver", params={"teacher": teacher, "dataset": dataset, "T": T, "B": B,
                                                 "seed": seed, "max_doc_chars": max_doc_chars}, **meta)
    shutil.rmtree(partial)
    log.info("silver %s/%s: %d rows, %d null scores", teacher, dataset, df.height, n_null)
    return df


def _hosted_gate(grader: Any, batch_stats: list[dict | None], meta: dict, partial: Path, *, teacher: str,
                 dataset: str) -> None:
    """The hosted usage over every batch into ``meta``; raises (nothing written) when more
    prompts failed than the settings allow, dropping the batches that hold failures first."""
    from presdep.training.hosted import HostedFailure, HostedStats, failure_gate

    stats = sp.merge_stats([HostedStats().as_dict(), *batch_stats])
    log.info("teacher %s usage: %s", teacher, {k: v for k, v in stats.items() if k != "first_error"})
    try:
        failure_gate(stats, grader.settings, f"teacher {teacher!r} on {dataset!r} ({grader.endpoint})")
    except HostedFailure:
        sp.drop_failed_batches(partial, len(batch_stats))
        raise
    meta.update(usage=stats, parse_failures=int(stats["failures"].get("parse", 0)),
                transport_failures=int(stats["failures"].get("transport", 0)))
    if grader.mock:
        meta["note"] = "MOCK teacher: offline stand-in grades, not a real model"
    if stats["prompts_failed"]:
        log.warning("teacher %s: %d of %d prompts failed within the allowed shares (%s); their scores are null",
                    teacher, stats["prompts_failed"], stats["prompts"], stats["failures"])


__all__ = [
    "TEACHER_KINDS", "teacher_orders", "silver_prompts", "silver_batches", "label_batches", "silver_labels",
    "open_weight_prompt_scorer", "make_open_weight_scorer", "silver_fingerprint", "silver_labels_files",
    "teacher_identity", "TEACHER_MEMO",
]
