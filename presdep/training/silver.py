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
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Sequence

import polars as pl
from tqdm.auto import tqdm

from presdep import scoring
from presdep.config.records import TEACHER_KINDS, PromptSettings, Protocol, ScoringRun, Teacher, Variant, thaw
from presdep.contracts.errors import InvalidInput
from presdep.contracts.presentations import chunk_positions, random_shuffle, stable_seed
from presdep.contracts.schemas import read_table, write_table
from presdep.scoring.template import prepare_doc

log = logging.getLogger(__name__)

# (query, docs) prompts -> per prompt a list of scores (None = failed prompt)
PromptScorer = Callable[[Sequence[tuple[str, Sequence[str]]]], list[list[float] | None]]


def teacher_orders(n: int, *, seed: int, dataset: str, query_id: str, T: int) -> list[list[int]]:
    """Shuffles 0..T-1 of a query (indices into the first-stage order)."""
    base = list(range(n))
    return [random_shuffle(base, stable_seed(int(seed), dataset, str(query_id), "teacher", t)) for t in range(T)]


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
    batch_prompts: int = 64,
) -> pl.DataFrame:
    """The ``silver`` table (query_id, doc_id, teacher, presentation, score, label_k1, label)."""
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
    results: list = []
    with tqdm(total=len(prompts), desc=f"silver {teacher} {dataset}", unit="prompt") as bar:
        for start in range(0, len(prompts), batch_prompts):
            part = prompts[start : start + batch_prompts]
            results += score_prompts(part)
            bar.update(len(part))
    if len(results) != len(prompts):
        raise RuntimeError(f"teacher returned {len(results)} results for {len(prompts)} prompts")
    rows: dict[str, list] = {"query_id": [], "doc_id": [], "presentation": [], "score": []}
    for (qid, t, ids), res in zip(layout, results):
        if res is not None and len(res) != len(ids):
            raise RuntimeError(f"teacher returned {len(res)} scores for a prompt of {len(ids)} documents")
        for k, d in enumerate(ids):
            rows["query_id"].append(qid)
            rows["doc_id"].append(d)
            rows["presentation"].append(t)
            rows["score"].append(None if res is None else float(res[k]))
    df = pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "presentation": pl.Int32, "score": pl.Float64})
    labels = df.group_by("query_id", "doc_id").agg(
        pl.col("score").filter(pl.col("presentation") == 0).first().alias("label_k1"),
        pl.col("score").drop_nulls().mean().alias("label"),
    )
    return (
        df.join(labels, on=["query_id", "doc_id"], how="left")
        .with_columns(pl.lit(teacher).alias("teacher"))
        .select("query_id", "doc_id", "teacher", "presentation", "score", "label_k1", "label")
        .sort("query_id", "presentation", "doc_id")
    )


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
) -> pl.DataFrame:
    """The ``silver_labels`` job: label a training dataset's candidates with one teacher.

    ``teacher`` is the teacher's record (its ``kind``, ``T`` and, for a hosted teacher,
    every endpoint setting in its spec); ``protocol`` is the training dataset's (B, seed,
    max_doc_chars, rubric, instruction). A hosted teacher whose failures exceed the
    configured shares raises :class:`presdep.training.hosted.HostedFailure` and
    writes nothing.
    """
    teacher_spec, kind, T = thaw(teacher.spec), teacher.kind, teacher.T
    B, seed, max_doc_chars = protocol.B, protocol.seed, protocol.max_doc_chars
    rubric, instruction = protocol.rubric, protocol.instruction
    teacher = teacher.name
    candidates = read_table(candidates_path, "candidates")
    meta: dict[str, Any] = {
        "teacher": teacher, "teacher_kind": kind, "dataset": dataset, "T": T, "B": B, "seed": seed,
        "presentations": "shuffles 0..T-1 seeded stable_seed(seed, dataset, query_id, 'teacher', t)",
        "labels": {"label_k1": "score under shuffle 0", "label": "mean of the non-null scores over shuffles 0..T-1"},
    }
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
        describe = scorer.describe() if hasattr(scorer, "describe") else {"scorer": getattr(scorer, "name", "?")}
        meta.update(teacher_spec={k: v for k, v in teacher_spec.items()}, readout=describe, mock=False,
                    template_sha256=getattr(scorer, "template_sha256", None))
        df = silver_labels(candidates, run, teacher=teacher, dataset=dataset, T=T, B=B, seed=seed,
                           max_doc_chars=max_doc_chars)
    else:
        from presdep.training.hosted import HOSTED_OPTIONAL, HOSTED_REQUIRED, HostedGrader, failure_gate

        if cache_dir is None:
            raise InvalidInput(f"hosted teacher {teacher!r} needs a cache_dir")
        spec = {k: teacher_spec[k] for k in HOSTED_REQUIRED + HOSTED_OPTIONAL if k in teacher_spec}
        grader = HostedGrader(spec, cache_dir, max_doc_chars=max_doc_chars, client=client)

        def run(prompts):
            return [None if r.grades is None else [float(g) for g in r.grades]
                    for r in grader.grade_many(prompts, desc=f"silver {teacher}")]

        df = silver_labels(candidates, run, teacher=teacher, dataset=dataset, T=T, B=B, seed=seed,
                           max_doc_chars=max_doc_chars)
        stats = grader.stats.as_dict()
        log.info("teacher %s usage: %s", teacher, {k: v for k, v in stats.items() if k != "first_error"})
        # Raises (nothing written) when more prompts failed than the settings allow.
        failure_gate(stats, grader.settings, f"teacher {teacher!r} on {dataset!r} ({grader.endpoint})")
        meta.update(teacher_spec=grader.describe(), usage=stats, mock=grader.mock,
                    template_sha256=grader.template.sha256,
                    parse_failures=int(stats["failures"].get("parse", 0)),
                    transport_failures=int(stats["failures"].get("transport", 0)))
        if grader.mock:
            meta["note"] = "MOCK teacher: offline stand-in grades, not a real model"
        if stats["prompts_failed"]:
            log.warning("teacher %s: %d of %d prompts failed within the allowed shares (%s); their scores are null",
                        teacher, stats["prompts_failed"], stats["prompts"], stats["failures"])
    n_null = int(df["score"].null_count())
    meta["null_scores"] = n_null
    write_table(df, out_path, "silver", params={"teacher": teacher, "dataset": dataset, "T": T, "B": B,
                                                 "seed": seed, "max_doc_chars": max_doc_chars}, **meta)
    log.info("silver %s/%s: %d rows, %d null scores", teacher, dataset, df.height, n_null)
    return df


__all__ = [
    "TEACHER_KINDS", "teacher_orders", "silver_labels", "open_weight_prompt_scorer",
    "make_open_weight_scorer", "silver_labels_files",
]
