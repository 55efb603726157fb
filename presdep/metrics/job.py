"""The `metrics` job: scores + qrels of one (variant, dataset) -> the metrics contract."""

from __future__ import annotations

import os

from presdep.schemas import read_metadata, read_table, write_table


def metrics_from_files(
    *,
    scores_path: str | os.PathLike,
    qrels_path: str | os.PathLike,
    out_path: str | os.PathLike,
    dataset: str,
    task: str,
    variant: str,
    seed: int | None = None,
    answers_path: str | os.PathLike | None = None,
    gold_path: str | os.PathLike | None = None,
) -> None:
    from presdep.metrics.compute import compute_metrics

    scores = read_table(scores_path, "scores")
    qrels = read_table(qrels_path, "qrels")
    answers = read_table(answers_path, "answers") if answers_path else None
    gold = read_table(gold_path, "answers_gold") if gold_path else None
    metrics = compute_metrics(
        scores, qrels, dataset=dataset, task=task, variant=variant, seed=seed, answers=answers, gold=gold
    )
    source = read_metadata(scores_path)
    write_table(
        metrics,
        out_path,
        "metrics",
        {"dataset": dataset, "task": task, "variant": variant, "seed": seed},
        scores_params=source.get("params"),
        template_sha256=source.get("template_sha256"),
    )
