"""From a ``scores`` table (+ qrels, answers) to the long ``metrics`` table.

Perturbations are never pooled: every perturbation in ``scores`` gets its own
rows. The ``canonical`` perturbation (one presentation: first-stage order) only
tunes the decision threshold t* and gets its own quality rows (nDCG, and EM/F1
for QA answers). Per-query rows carry the query id; the aggregate row of a
metric (query_id null) is the mean over the queries where the metric is
defined. Undefined per-query values (see instability/decisions: e.g. a single
presentation) are stored as null and left out of that mean, with a logged count.

BSC: a BSC variant's scores file stores, per "presentation", the mean score over
one ensemble of K shuffles. The same code then gives exactly what the method
asks for: nDCG of the averaged scores (averaged over ensembles), and tau-PSI,
Jaccard and flips between independent ensembles. Nothing special is needed.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import polars as pl

from presdep.metrics import decisions, instability, qa, quality
from presdep.schemas import write_table

log = logging.getLogger(__name__)

CANONICAL = "canonical"
ZENG_PERTURBATIONS = ("random_shuffle", "middle_injection")
TASKS = ("rerank", "qa", "response")
_REQUIRED = ("query_id", "doc_id", "perturbation", "presentation", "score")


@dataclass
class Block:
    """All presentations of one query under one perturbation, aligned by doc."""

    query_id: str
    doc_ids: list[str]  # ascending
    presentations: np.ndarray  # (M,) ascending presentation ids
    scores: np.ndarray  # (M, n)
    positions: np.ndarray | None  # (M, n) presented position (as stored) or None


def _fail_missing(df: pl.DataFrame, pert: str, qid: str) -> None:
    sub = df.filter((pl.col("perturbation") == pert) & (pl.col("query_id") == qid)).sort("presentation")
    every = set(sub["doc_id"].to_list())
    for (m,), part in sub.group_by(["presentation"], maintain_order=True):
        lacking = sorted(every - set(part["doc_id"].to_list()))
        if lacking:
            raise ValueError(
                f"scores: query {qid!r} (perturbation {pert!r}) presentation {m} lacks doc(s) "
                f"{lacking[:5]}{' ...' if len(lacking) > 5 else ''}; every presentation of a query "
                f"must hold the same candidates exactly once"
            )
    raise ValueError(f"scores: query {qid!r} (perturbation {pert!r}) has inconsistent presentations")


def build_blocks(scores: pl.DataFrame) -> dict[str, list[Block]]:
    """Validate a ``scores`` table and split it into {perturbation: [Block per query]}.

    Raises ValueError naming the query when a presentation lacks a doc, has a doc
    twice, or holds a NaN score.
    """
    missing = [c for c in _REQUIRED if c not in scores.columns]
    if missing:
        raise ValueError(f"scores lacks column(s) {missing}; expected at least {list(_REQUIRED)}")
    has_pos = "position" in scores.columns
    cols = list(_REQUIRED) + (["position"] if has_pos else [])
    df = scores.select(cols).with_columns(
        pl.col("query_id").cast(pl.String),
        pl.col("doc_id").cast(pl.String),
        pl.col("perturbation").cast(pl.String),
        pl.col("presentation").cast(pl.Int64),
        pl.col("score").cast(pl.Float64),
    )
    for c in cols:
        if df[c].null_count():
            row = int(df[c].is_null().arg_max())
            raise ValueError(f"scores: column {c!r} is null at row {row} (query {df['query_id'][row]!r})")
    nan = df["score"].is_nan()
    if nan.any():
        r = df.row(int(nan.arg_max()), named=True)
        raise ValueError(
            f"scores: query {r['query_id']!r} (perturbation {r['perturbation']!r}, presentation "
            f"{r['presentation']}) has a NaN score for doc {r['doc_id']!r}"
        )
    # Integer codes in string order (Enum categories given sorted), then one numpy lexsort:
    # far cheaper than sorting millions of strings.
    pert_u, pc = _codes(df["perturbation"])
    q_u, qc = _codes(df["query_id"])
    d_u, dc = _codes(df["doc_id"])
    pres = df["presentation"].to_numpy()
    order = np.lexsort((dc, pres, qc, pc))
    pc, qc, dc, pres = pc[order], qc[order], dc[order], pres[order]
    score = df["score"].to_numpy()[order]
    pos = df["position"].cast(pl.Int64).to_numpy()[order] if has_pos else None

    same_group = (pc[1:] == pc[:-1]) & (qc[1:] == qc[:-1])
    same_pres = same_group & (pres[1:] == pres[:-1])
    dup = same_pres & (dc[1:] == dc[:-1])
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise ValueError(
            f"scores: query {q_u[qc[i]]!r} (perturbation {pert_u[pc[i]]!r}) presentation "
            f"{pres[i]} has doc {d_u[dc[i]]!r} twice"
        )
    total = len(pc)
    g_start = np.flatnonzero(np.r_[True, ~same_group]) if total else np.zeros(0, np.int64)
    g_end = np.r_[g_start[1:], total]
    p_start = np.flatnonzero(np.r_[True, ~same_pres]) if total else np.zeros(0, np.int64)
    p_len = np.diff(np.r_[p_start, total])
    first_p = np.searchsorted(p_start, g_start)  # index of each group's first presentation
    n_pres = np.diff(np.r_[first_p, len(p_start)])
    n_docs = p_len[first_p]
    # Every presentation of a group must list exactly the docs of its first presentation.
    ok = np.ones(len(g_start), dtype=bool)
    if total:
        ok &= np.maximum.reduceat(p_len, first_p) == np.minimum.reduceat(p_len, first_p)
        ok &= n_pres * n_docs == g_end - g_start
        row_group = np.repeat(np.arange(len(g_start)), g_end - g_start)
        offset = np.arange(total) - g_start[row_group]
        ref = g_start[row_group] + offset % n_docs[row_group]
        ok &= np.logical_and.reduceat(dc == dc[ref], g_start)
    if not ok.all():
        g = int(np.flatnonzero(~ok)[0])
        _fail_missing(df, pert_u[pc[g_start[g]]], q_u[qc[g_start[g]]])

    d_arr = np.asarray(d_u, dtype=object)
    out: dict[str, list[Block]] = {}
    for g, (a, b) in enumerate(zip(g_start.tolist(), g_end.tolist())):
        m, n = int(n_pres[g]), int(n_docs[g])
        out.setdefault(pert_u[pc[a]], []).append(
            Block(
                query_id=q_u[qc[a]],
                doc_ids=d_arr[dc[a : a + n]].tolist(),
                presentations=pres[a:b:n].copy(),
                scores=score[a:b].reshape(m, n),
                positions=None if pos is None else pos[a:b].reshape(m, n),
            )
        )
    return out


def _codes(series: pl.Series) -> tuple[list[str], np.ndarray]:
    """(sorted unique strings, code of each row); codes follow string (byte) order."""
    uniq = series.unique().sort()
    codes = series.cast(pl.Enum(uniq)).to_physical().cast(pl.Int64).to_numpy()
    return uniq.to_list(), codes


def strongest_relevant(doc_ids: list[str], judged: Mapping[str, int]) -> int | None:
    """Index of the pool's strongest relevant doc: highest grade >= 1, ties by smallest doc id."""
    best: tuple[int, str] | None = None
    best_i = None
    for i, d in enumerate(doc_ids):
        g = judged.get(d, 0)
        if g >= 1 and (best is None or g > best[0] or (g == best[0] and d < best[1])):
            best, best_i = (g, d), i
    return best_i


class _Rows:
    """Collects per-query and aggregate rows of the long metrics table."""

    def __init__(self) -> None:
        self.pert: list[str] = []
        self.qid: list[str | None] = []
        self.metric: list[str] = []
        self.value: list[float | None] = []

    def add(self, pert: str, qid: str | None, metric: str, value: float | None) -> None:
        v = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
        self.pert.append(pert)
        self.qid.append(qid)
        self.metric.append(metric)
        self.value.append(v)

    def per_query(self, pert: str, metric: str, qids: list[str], values) -> None:
        vals = [float(v) for v in values]
        for q, v in zip(qids, vals):
            self.add(pert, q, metric, v)
        finite = [v for v in vals if not math.isnan(v)]
        if len(finite) < len(vals):
            log.info(
                "%s/%s: %d of %d queries undefined (null), left out of the mean",
                pert, metric, len(vals) - len(finite), len(vals),
            )
        self.add(pert, None, metric, float(np.mean(finite)) if finite else None)


def compute_metrics(
    scores: pl.DataFrame,
    qrels: pl.DataFrame,
    *,
    dataset: str,
    task: str,
    variant: str,
    seed: int | None,
    answers: pl.DataFrame | None = None,
    gold: pl.DataFrame | None = None,
    threshold: float | None = None,
    k: int | None = None,
) -> pl.DataFrame:
    """The ``metrics`` table (schemas.SCHEMAS["metrics"]) of one variant on one dataset.

    task "rerank"/"qa": ndcg@10, tau_psi, jaccard, set_flip, retained_size per
    perturbation; zeng_psi (per query; aggregate = mean) and zeng_psi_corpus
    (aggregate only) for random_shuffle and middle_injection when ``scores`` has a
    ``position`` column; an aggregate-only "threshold" row under perturbation
    "canonical". t* is tuned on the canonical rows unless ``threshold`` is given.
    task "qa" with ``answers``: answer_flip; with ``gold`` too: em, f1.
    task "response": ndcg@1, tau_psi, pair_flip, selection_flip.
    ``k`` overrides the nDCG cut-off (default 10, 1 for response).
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
    k = k if k is not None else (1 if task == "response" else 10)
    ndcg_name = f"ndcg@{k}"
    qrels_d = quality.qrels_to_dict(qrels)
    blocks = build_blocks(scores)
    rows = _Rows()

    canon = blocks.get(CANONICAL, [])
    for b in canon:
        if b.scores.shape[0] != 1:
            raise ValueError(
                f"scores: query {b.query_id!r} has {b.scores.shape[0]} canonical presentations; "
                f"the canonical perturbation is exactly one presentation"
            )

    # Decision threshold: tuned once on the canonical presentation, then frozen.
    t_star = None
    if task in ("rerank", "qa"):
        if threshold is not None:
            t_star = float(threshold)
        else:
            judged = [b for b in canon if b.query_id in qrels_d]
            if not judged:
                raise ValueError(
                    "cannot tune the retained-set threshold: no canonical presentation of a judged "
                    "query in scores; add perturbation 'canonical' rows or pass threshold="
                )
            t_star = decisions.tune_threshold(
                [b.scores[0] for b in judged],
                [np.array([qrels_d[b.query_id].get(d, 0) >= 1 for d in b.doc_ids]) for b in judged],
            )
        log.info("retained-set threshold t* = %.6g", t_star)

    # Canonical first, then the perturbations in name order.
    order = sorted(blocks, key=lambda p: (p != CANONICAL, p))
    for pert in order:
        bl = blocks[pert]
        qids = [b.query_id for b in bl]
        ndcg = quality.ndcg_presentations(
            qids, [b.doc_ids for b in bl], [b.scores for b in bl], qrels_d, k, ids_sorted=True
        )
        judged_q = [q for q in qids if q in ndcg]
        rows.per_query(pert, ndcg_name, judged_q, [ndcg[q].mean() for q in judged_q])
        if pert == CANONICAL:
            continue
        rows.per_query(pert, "tau_psi", qids, instability.tau_psi_many([b.scores for b in bl]))
        if task in ("rerank", "qa"):
            jac, flip, size = decisions.set_stats_many([b.scores for b in bl], t_star)
            rows.per_query(pert, "jaccard", qids, jac)
            rows.per_query(pert, "set_flip", qids, flip)
            rows.per_query(pert, "retained_size", qids, size)
            if pert in ZENG_PERTURBATIONS:
                _zeng(rows, pert, bl, ndcg, qrels_d)
        else:
            rows.per_query(pert, "pair_flip", qids, [decisions.pair_flip(b.scores, b.doc_ids) for b in bl])
            rows.per_query(
                pert, "selection_flip", qids, [decisions.selection_flip(b.scores, b.doc_ids) for b in bl]
            )
    if t_star is not None:
        rows.add(CANONICAL, None, "threshold", t_star)

    if answers is not None:
        if task != "qa":
            raise ValueError(f"answers are only used for task 'qa', not {task!r}")
        _answers(rows, answers, gold)
    elif gold is not None:
        log.warning("gold answers given without answers: no answer metrics")

    n_rows = len(rows.metric)
    return pl.DataFrame(
        {
            "dataset": [dataset] * n_rows,
            "task": [task] * n_rows,
            "variant": [variant] * n_rows,
            "seed": pl.Series([seed] * n_rows, dtype=pl.Int32),
            "perturbation": rows.pert,
            "query_id": pl.Series(rows.qid, dtype=pl.String),
            "metric": rows.metric,
            "value": pl.Series(rows.value, dtype=pl.Float64),
        }
    )


def _zeng(rows: _Rows, pert: str, bl: list[Block], ndcg: dict[str, np.ndarray], qrels_d) -> None:
    """Zeng et al. PSI: buckets by where the strongest relevant doc was presented."""
    if any(b.positions is None for b in bl):
        log.warning("%s: scores have no 'position' column; zeng_psi not computed", pert)
        return
    judged = [b for b in bl if b.query_id in ndcg]
    if not judged:
        return
    values = np.full(len(judged), np.nan)
    means = np.full((len(judged), instability.N_BUCKETS), np.nan)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, b in enumerate(judged):
        by_shape.setdefault(b.scores.shape, []).append(i)
    for (m, n), idx in by_shape.items():
        grades = np.array([[qrels_d[judged[i].query_id].get(d, 0) for d in judged[i].doc_ids] for i in idx])
        # Docs are in ascending id order, so argmax (first maximum) = highest grade, then
        # smallest doc id: the rule of strongest_relevant and of the presentations.
        strongest = grades.argmax(axis=1)
        has_rel = grades.max(axis=1) >= 1
        pos = _position_ranks([judged[i] for i in idx])  # (Q, M, n)
        where = np.take_along_axis(pos, strongest[:, None, None], axis=2)[:, :, 0]  # (Q, M)
        if pert == "middle_injection" and n >= 3:
            expected = np.array([0, n // 2, n - 1])
            bad = has_rel & ~(
                (np.sort(where, axis=1) == expected).all(axis=1) if m == 3 else np.zeros(len(idx), bool)
            )
            if bad.any():
                r = int(np.flatnonzero(bad)[0])
                b = judged[idx[r]]
                raise ValueError(
                    f"middle_injection: query {b.query_id!r}: the strongest relevant doc "
                    f"{b.doc_ids[strongest[r]]!r} (highest grade, ties by smallest doc id) sits at "
                    f"positions {where[r].tolist()}, expected top, middle and bottom (0, {n // 2}, "
                    f"{n - 1}); the presentations and the metrics disagree on which doc was injected"
                )
        buckets = (instability.N_BUCKETS * where) // n
        nd = np.stack([ndcg[judged[i].query_id] for i in idx])  # (Q, M)
        for bkt in range(instability.N_BUCKETS):
            sel = buckets == bkt
            cnt = sel.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                means[idx, bkt] = np.where(cnt > 0, (nd * sel).sum(axis=1) / cnt, np.nan)
        means[np.array(idx)[~has_rel]] = np.nan  # no relevant doc in the pool: nothing to place
    for i in range(len(judged)):
        values[i] = instability.zeng_from_bucket_means(means[i])
    rows.per_query(pert, "zeng_psi", [b.query_id for b in judged], values)
    rows.add(pert, None, "zeng_psi_corpus", instability.zeng_psi_corpus(means))


def _position_ranks(blocks: list[Block]) -> np.ndarray:
    """(Q, M, n) 0-based presented positions of blocks of equal shape (ranks of the stored
    positions within each presentation; stored 0..n-1 pass through)."""
    p = np.stack([b.positions for b in blocks])
    srt = np.sort(p, axis=2)
    if (srt == np.arange(p.shape[2])).all():
        return p
    dup = (np.diff(srt, axis=2) == 0).any(axis=2)
    if dup.any():
        qi, m = (int(x[0]) for x in np.nonzero(dup))
        raise ValueError(
            f"scores: query {blocks[qi].query_id!r} presentation {blocks[qi].presentations[m]} places "
            f"two docs at the same position"
        )
    return p.argsort(axis=2).argsort(axis=2)


def _answers(rows: _Rows, answers: pl.DataFrame, gold: pl.DataFrame | None) -> None:
    need = {"query_id", "perturbation", "presentation", "answer"}
    if need - set(answers.columns):
        raise ValueError(f"answers lacks column(s) {sorted(need - set(answers.columns))}")
    golds: dict[str, list[str]] = {}
    if gold is not None:
        if {"query_id", "answer"} - set(gold.columns):
            raise ValueError("gold answers need columns query_id, answer")
        for q, a in gold.select(pl.col("query_id").cast(pl.String), "answer").iter_rows():
            golds.setdefault(q, []).append(a)
    a = answers.select(
        pl.col("query_id").cast(pl.String), pl.col("perturbation").cast(pl.String), "presentation", "answer"
    )
    dup = a.select(["perturbation", "query_id", "presentation"]).is_duplicated()
    if dup.any():
        r = a.row(int(dup.arg_max()), named=True)
        raise ValueError(
            f"answers: query {r['query_id']!r} (perturbation {r['perturbation']!r}) has two answers "
            f"for presentation {r['presentation']}"
        )
    a = a.sort(["perturbation", "query_id", "presentation"])
    grouped = a.group_by(["perturbation", "query_id"], maintain_order=True).agg(pl.col("answer"))
    for (pert,), part in grouped.group_by(["perturbation"], maintain_order=True):
        qids = part["query_id"].to_list()
        ans = part["answer"].to_list()
        if pert != CANONICAL:
            rows.per_query(pert, "answer_flip", qids, [qa.answer_flip(x) for x in ans])
        if gold is None:
            continue
        have = [i for i, q in enumerate(qids) if q in golds]
        if len(have) < len(qids):
            log.info("%s: %d of %d queries have no gold answer; EM/F1 skip them", pert, len(qids) - len(have), len(qids))
        gq = [qids[i] for i in have]
        rows.per_query(pert, "em", gq, [np.mean([qa.exact_match(x, golds[qids[i]]) for x in ans[i]]) for i in have])
        rows.per_query(pert, "f1", gq, [np.mean([qa.f1_score(x, golds[qids[i]]) for x in ans[i]]) for i in have])


def write_metrics(df: pl.DataFrame, path: str | os.PathLike, params: Mapping[str, Any] | None = None):
    """Validate against the ``metrics`` contract and write atomically."""
    return write_table(df, path, "metrics", params)


def metrics_from_files(
    scores_path: str | os.PathLike,
    qrels_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    dataset: str,
    task: str,
    variant: str,
    seed: int | None,
    answers_path: str | os.PathLike | None = None,
    gold_path: str | os.PathLike | None = None,
    threshold: float | None = None,
) -> pl.DataFrame:
    """Read the Parquet artifacts, compute the metrics, write them (the workflow's entry point)."""
    from presdep.schemas import read_table

    metrics = compute_metrics(
        read_table(scores_path, "scores"),
        read_table(qrels_path, "qrels"),
        dataset=dataset,
        task=task,
        variant=variant,
        seed=seed,
        answers=read_table(answers_path, "answers") if answers_path else None,
        gold=read_table(gold_path, "answers_gold") if gold_path else None,
        threshold=threshold,
    )
    params = {
        "dataset": dataset, "task": task, "variant": variant, "seed": seed,
        "scores": str(scores_path), "qrels": str(qrels_path),
        "answers": None if answers_path is None else str(answers_path),
        "gold": None if gold_path is None else str(gold_path), "threshold": threshold,
    }
    write_metrics(metrics, out_path, params)
    return metrics
