"""From a ``scores`` table (+ qrels, answers, the threshold artifact) to the long
``metrics`` table (docs/README.md: one page per metric).

Perturbations are never pooled: every perturbation in ``scores`` gets its own
rows. Quality cells come from the first-stage pass (perturbation
``first_stage``); decision metrics compare the decision presentations of
presdep.views (shuffles, or BSC ensembles), canonical = presentation 0. Every
ranking is strict, ties broken by presented position (first shown wins).
Per-query rows carry the query id; the aggregate row of a metric (query_id
null) is the mean over the queries where the metric is defined. Undefined
per-query values (e.g. a single presentation) are stored as null and left out
of that mean, with a logged count.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from presdep.metrics import decisions, instability, qa, quality
from presdep.schemas import write_table
from presdep.views import (
    CANONICAL_PRESENTATION,
    FIRST_STAGE,
    RANDOM_SHUFFLE,
    decision_presentations,
    first_stage_pass,
)

log = logging.getLogger(__name__)

CANONICAL = "canonical"  # the v1 first-stage perturbation name, refused in scores (see _view)
BSC_CURVE = (1, 2, 3, 5, 10)
READER_K = 5  # the paper's headline top-k paragraphs for the QA reader
# The first-stage pass's measures per task (quality cells first).
QUALITY_MEASURES = {
    "rerank": ("ndcg@10", "ndcg@5", "map", "mrr"),
    "qa": ("ndcg@10", "recall@2", "recall@5"),
    "response": ("ndcg@1", "ndcg@10", "mrr"),
}
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


def _view(scores: pl.DataFrame, bsc_k: int, ensembles: int) -> pl.DataFrame:
    """The frame metrics are computed on: the quality pass (perturbation first_stage) and,
    per other perturbation, its decision presentations (BSC ensembles for bsc_k > 1)."""
    perts = sorted(set(scores["perturbation"].cast(pl.String).unique().to_list()) - {FIRST_STAGE})
    if CANONICAL in perts:
        raise ValueError(
            "scores hold a 'canonical' perturbation (the v1 first-stage rows); presdep now names the "
            "first-stage pass 'first_stage' and uses shuffle 0 as canonical: re-score this variant"
        )
    parts = [first_stage_pass(scores, bsc_k=bsc_k, ensembles=ensembles).with_columns(
        pl.lit(FIRST_STAGE).alias("perturbation"))]
    if bsc_k > 1 and set(perts) - {RANDOM_SHUFFLE}:
        # BSC's presentations are ensembles of random shuffles; other perturbations hold
        # single passes, which are not the BSC scorer's output.
        log.warning("BSC (K = %d): perturbation(s) %s are single passes, not BSC scores; not measured",
                    bsc_k, sorted(set(perts) - {RANDOM_SHUFFLE}))
        perts = [p for p in perts if p == RANDOM_SHUFFLE]
    for p in perts:
        dp = decision_presentations(scores, bsc_k=bsc_k, ensembles=ensembles, perturbation=p)
        parts.append(dp.with_columns(pl.lit(p).alias("perturbation")))
    return pl.concat(parts, how="diagonal_relaxed")


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
    thresholds: Mapping[str, Any] | None = None,
    bsc_k: int = 1,
    ensembles: int = 4,
    reader_k: int = READER_K,
    bsc_curve: Sequence[int] = BSC_CURVE,
    zeng: bool = True,
) -> pl.DataFrame:
    """The ``metrics`` table (schemas.SCHEMAS["metrics"]) of one variant on one dataset.

    Perturbation ``first_stage`` holds the quality cells (the first-stage pass; for BSC,
    ensemble 0's BSC scores): rerank ndcg@10, ndcg@5, map, mrr; qa ndcg@10, recall@2,
    recall@5; response ndcg@1, ndcg@10, mrr. Every other perturbation (its decision
    presentations, presdep.views) gets ndcg{k}_shuffle_mean/worst/best, tau_psi (the
    paper's: strict rankings, ties by presented position, tau-a) and tau_psi_b (tau-b
    on raw scores), and per task:

    * rerank, on the test half of ``thresholds`` at its frozen t_star: jaccard,
      set_flip, retained_size, precision, recall, f1, retention, canonical_precision,
      canonical_recall, canonical_f1, canonical_retention, score_variance,
      matched_jaccard, matched_set_flip; zeng_psi / zeng_psi_corpus; aggregate rows
      t_star and warn_* (degenerate threshold). ``thresholds`` None: tuned here by
      presdep.metrics.thresholds (the CLI path; the workflow passes its artifact).
    * qa: gold_in_top{reader_k}, gold_slot_mean, gold_slot_var; with ``answers``:
      answer_flip, and with ``gold``: em and f1 (canonical, presentation 0), em_mean,
      f1_mean (over presentations).
    * response: pair_flip, selection_flip, selected_quality_flip,
      selected_quality_mean, selected_quality_canonical.

    BSC (``bsc_k`` > 1): also the K-curve under perturbations ``bsc_curve_k{K}``.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
    for c in ("position",):
        if c not in scores.columns:
            raise ValueError(f"scores lacks column {c!r}: ties are broken by presented position")
    qrels_d = quality.qrels_to_dict(qrels)
    blocks = build_blocks(_view(scores, bsc_k, ensembles))
    rows = _Rows()
    if FIRST_STAGE not in blocks:
        raise ValueError("scores have no first-stage pass rows (perturbation 'first_stage')")
    for b in blocks[FIRST_STAGE]:
        if b.scores.shape[0] != 1:
            raise ValueError(f"scores: query {b.query_id!r} has {b.scores.shape[0]} first-stage presentations")

    if task == "rerank":
        if thresholds is None:
            from presdep.metrics.thresholds import tune_thresholds

            thresholds = tune_thresholds(scores, qrels, bsc_k=bsc_k, ensembles=ensembles)
        t_star = float(thresholds["t_star"])
        test_q = set(str(q) for q in thresholds["test_queries"])
        log.info("retained-set threshold t* = %.6g (%d test queries)", t_star, len(test_q))

    qual_k = 1 if task == "response" else 10
    for pert in sorted(blocks, key=lambda p: (p != FIRST_STAGE, p)):
        bl = blocks[pert]
        qids = [b.query_id for b in bl]
        args = (qids, [b.doc_ids for b in bl], [b.scores for b in bl], [b.positions for b in bl], qrels_d)
        if pert == FIRST_STAGE:
            res = quality.evaluate_presentations(*args, QUALITY_MEASURES[task])
            for name, per_q in res.items():
                judged = [q for q in qids if q in per_q]
                rows.per_query(pert, name, judged, [per_q[q][0] for q in judged])
            continue
        nd = quality.evaluate_presentations(*args, [f"ndcg@{qual_k}"])[f"ndcg@{qual_k}"]
        judged = [q for q in qids if q in nd]
        for stat, fn in (("mean", np.mean), ("worst", np.min), ("best", np.max)):
            rows.per_query(pert, f"ndcg{qual_k}_shuffle_{stat}", judged, [fn(nd[q]) for q in judged])
        strict = [quality.presented_ranks(b.scores, b.positions) for b in bl]
        rows.per_query(pert, "tau_psi", qids, instability.tau_psi_many(strict))
        rows.per_query(pert, "tau_psi_b", qids, instability.tau_psi_many([b.scores for b in bl]))
        if task == "rerank":
            _rerank_sets(rows, pert, [b for b in bl if b.query_id in test_q], qrels_d, t_star)
            if zeng and bsc_k == 1 and pert in ZENG_PERTURBATIONS:
                _zeng(rows, pert, bl, nd, qrels_d)
        elif task == "qa":
            _gold_slots(rows, pert, bl, qrels_d, reader_k)
        else:
            _responses(rows, pert, bl, qrels_d)
    if task == "rerank":
        _threshold_rows(rows, thresholds, blocks.get(RANDOM_SHUFFLE, []), qrels_d, test_q)
    rows.add(RANDOM_SHUFFLE, None, "passes_per_query", _passes_per_query(scores))

    if answers is not None:
        if task != "qa":
            raise ValueError(f"answers are only used for task 'qa', not {task!r}")
        _answers(rows, answers, gold)
    elif gold is not None:
        log.warning("gold answers given without answers: no answer metrics")
    if bsc_k > 1:
        from presdep.metrics.bsc import curve_rows

        for pert, qid, metric, val in curve_rows(scores, qrels, task=task, bsc_k=bsc_k, ensembles=ensembles,
                                                 ks=bsc_curve, thresholds=thresholds):
            rows.add(pert, qid, metric, val)

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


def _passes_per_query(scores: pl.DataFrame) -> float:
    """Scoring passes (presentations of any perturbation) per query: the cost BSC pays."""
    per_q = scores.group_by("query_id").agg(
        pl.struct("perturbation", "presentation").n_unique().alias("n")
    )
    return float(per_q["n"].mean()) if per_q.height else math.nan


def rerank_set_values(b: Block, relevant: np.ndarray, t_star: float) -> dict[str, float]:
    """Retained-set statistics of one query's (M, n) presentations at t* (see decisions)."""
    kept = decisions.retained(b.scores, t_star)
    jac, flip = decisions.pair_stats(kept)
    q = decisions.retained_quality(kept, relevant)
    matched = decisions.matched_kept(b.scores, b.positions, int(kept[0].sum()))
    mj, mf = decisions.pair_stats(matched)
    return {
        "jaccard": jac,
        "set_flip": flip,
        "retained_size": float(kept.sum(axis=1).mean()),
        **{k: float(v.mean()) for k, v in q.items()},
        **{f"canonical_{k}": float(v[0]) for k, v in q.items()},
        # population variance of each doc's score across presentations, mean over docs
        "score_variance": float(b.scores.var(axis=0).mean()) if b.scores.shape[0] >= 2 else math.nan,
        "matched_jaccard": mj,
        "matched_set_flip": mf,
    }


def _rerank_sets(rows: _Rows, pert: str, bl: list[Block], qrels_d, t_star: float) -> None:
    if not bl:
        log.warning("%s: no test-half query in the scores; no retained-set metrics", pert)
        return
    per = [
        rerank_set_values(b, np.array([qrels_d.get(b.query_id, {}).get(d, 0) >= 1 for d in b.doc_ids]), t_star)
        for b in bl
    ]
    qids = [b.query_id for b in bl]
    for name in per[0]:
        rows.per_query(pert, name, qids, [p[name] for p in per])


def _threshold_rows(rows: _Rows, thr: Mapping[str, Any], bl: list[Block], qrels_d, test_q: set[str]) -> None:
    """t* and the degenerate-threshold flags (1 = raised), counted on the test half."""
    t = float(thr["t_star"])
    rows.add(RANDOM_SHUFFLE, None, "t_star", t)
    test = [b for b in bl if b.query_id in test_q]
    kept = np.concatenate([(b.scores >= t).ravel() for b in test]) if test else np.zeros(0, bool)
    rows.add(RANDOM_SHUFFLE, None, "warn_threshold_keeps_all", float(kept.size > 0 and kept.all()))
    rows.add(RANDOM_SHUFFLE, None, "warn_threshold_keeps_none", float(kept.size > 0 and not kept.any()))
    rows.add(RANDOM_SHUFFLE, None, "warn_single_presentation", float(sum(b.scores.shape[0] < 2 for b in bl)))
    no_rel = sum(not any(qrels_d.get(b.query_id, {}).get(d, 0) >= 1 for d in b.doc_ids) for b in bl)
    rows.add(RANDOM_SHUFFLE, None, "warn_queries_without_relevant", float(no_rel))
    for name, flag in (("keeps every candidate", kept.size > 0 and kept.all()),
                       ("keeps no candidate", kept.size > 0 and not kept.any())):
        if flag:
            log.warning("degenerate threshold: t* = %.6g %s on the test half", t, name)
    if no_rel:
        log.warning("%d queries have no relevant document in their pool (F1 0)", no_rel)


def _gold_slots(rows: _Rows, pert: str, bl: list[Block], qrels_d, k: int) -> None:
    """Where the gold (grade >= 1) paragraphs land in each presentation's score order.

    gold_in_top{k}: share of presentations whose top k (by -score, position: the
    reader's input) hold EVERY gold paragraph. gold_slot_mean: mean 1-based slot of
    the gold paragraphs over presentations; gold_slot_var: each gold paragraph's
    population variance of its slot across presentations, mean over gold paragraphs.
    Queries without a gold paragraph are left out.
    """
    qids, top, smean, svar = [], [], [], []
    for b in bl:
        gold = np.array([qrels_d.get(b.query_id, {}).get(d, 0) >= 1 for d in b.doc_ids])
        if not gold.any():
            continue
        order = quality.presented_order(b.scores, b.positions)
        slot = order.argsort(axis=1) + 1  # (M, n) 1-based slot of each doc
        g = slot[:, gold]
        qids.append(b.query_id)
        top.append(float((g <= k).all(axis=1).mean()))
        smean.append(float(g.mean()))
        svar.append(float(g.var(axis=0).mean()))
    rows.per_query(pert, f"gold_in_top{k}", qids, top)
    rows.per_query(pert, "gold_slot_mean", qids, smean)
    rows.per_query(pert, "gold_slot_var", qids, svar)


def _responses(rows: _Rows, pert: str, bl: list[Block], qrels_d) -> None:
    qids = [b.query_id for b in bl]
    rows.per_query(pert, "pair_flip", qids, [decisions.pair_flip(b.scores, b.doc_ids) for b in bl])
    rows.per_query(pert, "selection_flip", qids, [decisions.selection_flip(b.scores, b.doc_ids) for b in bl])
    judged = [b for b in bl if b.query_id in qrels_d]
    sel = [
        decisions.selected_quality(b.scores, b.doc_ids, [qrels_d[b.query_id].get(d, 0) for d in b.doc_ids])
        for b in judged
    ]
    jq = [b.query_id for b in judged]
    rows.per_query(pert, "selected_quality_flip", jq, [decisions.mode_flip(s.tolist()) for s in sel])
    rows.per_query(pert, "selected_quality_mean", jq, [s.mean() for s in sel])
    rows.per_query(pert, "selected_quality_canonical", jq, [s[0] for s in sel])


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


def write_metrics(df: pl.DataFrame, path: str | os.PathLike, params: Mapping[str, Any] | None = None):
    """Validate against the ``metrics`` contract and write atomically."""
    return write_table(df, path, "metrics", params)




def _answers(rows: _Rows, answers: pl.DataFrame, gold: pl.DataFrame | None) -> None:
    """answer_flip per perturbation; with gold answers, canonical (presentation 0) EM and F1
    and their means over presentations."""
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
    grouped = a.group_by(["perturbation", "query_id"], maintain_order=True).agg(pl.col("answer"), pl.col("presentation"))
    for (pert,), part in grouped.group_by(["perturbation"], maintain_order=True):
        qids = part["query_id"].to_list()
        ans = part["answer"].to_list()
        pres = part["presentation"].to_list()
        rows.per_query(pert, "answer_flip", qids, [qa.answer_flip(x) for x in ans])
        if gold is None:
            continue
        have = [i for i, q in enumerate(qids) if q in golds]
        if len(have) < len(qids):
            log.info("%s: %d of %d queries have no gold answer; EM/F1 skip them", pert, len(qids) - len(have), len(qids))
        canon = [i for i in have if CANONICAL_PRESENTATION in pres[i]]
        if len(canon) < len(have):
            log.warning("%s: %d queries have no answer for presentation 0; canonical EM/F1 skip them",
                        pert, len(have) - len(canon))
        for name, fn in (("em", qa.exact_match), ("f1", qa.f1_score)):
            rows.per_query(pert, name, [qids[i] for i in canon],
                           [fn(ans[i][pres[i].index(CANONICAL_PRESENTATION)], golds[qids[i]]) for i in canon])
            rows.per_query(pert, f"{name}_mean", [qids[i] for i in have],
                           [np.mean([fn(x, golds[qids[i]]) for x in ans[i]]) for i in have])


def _reader_k(answers_path: str | os.PathLike | None) -> int:
    """The k an answers file records (metadata ``k`` or ``params.k``); the paper's 5 if none."""
    from presdep.schemas import read_metadata

    meta = read_metadata(answers_path) if answers_path else {}
    k = meta.get("k", (meta.get("params") or {}).get("k"))
    if k is None:
        log.warning("%s records no reader k; gold_in_top%d uses the paper's k = %d", answers_path, READER_K, READER_K)
        return READER_K
    return int(k)


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
    thresholds_path: str | os.PathLike | None = None,
    bsc_k: int = 1,
    ensembles: int = 4,
    reader_k: int | None = None,
) -> pl.DataFrame:
    """Read the artifacts, compute the metrics, write them (the workflow's entry point).

    Reranking needs ``thresholds_path`` (the threshold artifact, the one source of t*).
    QA: ``reader_k`` (the reader's top-k paragraphs) defaults to the k the answers
    file records in its metadata.
    """
    from presdep.metrics.thresholds import read_thresholds
    from presdep.schemas import read_metadata as read_metadata_of
    from presdep.schemas import read_table

    if task == "qa" and reader_k is None:
        reader_k = _reader_k(answers_path)

    if task == "rerank" and thresholds_path is None:
        raise ValueError(f"{scores_path}: reranking metrics need the threshold artifact (thresholds_path)")
    metrics = compute_metrics(
        read_table(scores_path, "scores"),
        read_table(qrels_path, "qrels"),
        dataset=dataset,
        task=task,
        variant=variant,
        seed=seed,
        answers=read_table(answers_path, "answers") if answers_path else None,
        gold=read_table(gold_path, "answers_gold") if gold_path else None,
        thresholds=read_thresholds(thresholds_path) if thresholds_path else None,
        bsc_k=bsc_k,
        ensembles=ensembles,
        reader_k=reader_k if reader_k is not None else READER_K,
    )
    stats = read_metadata_of(scores_path).get("scorer_stats") or {}
    if "parse_failures" in stats:  # generative listwise: windows whose reply needed the repair rule
        extra = [("parse_failures", float(stats["parse_failures"])),
                 ("parse_failure_share", stats["parse_failures"] / stats["windows"] if stats.get("windows") else None)]
        metrics = pl.concat([metrics, pl.DataFrame({
            "dataset": [dataset] * 2, "task": [task] * 2, "variant": [variant] * 2,
            "seed": pl.Series([seed] * 2, dtype=pl.Int32), "perturbation": [FIRST_STAGE] * 2,
            "query_id": pl.Series([None, None], dtype=pl.String), "metric": [m for m, _ in extra],
            "value": pl.Series([v for _, v in extra], dtype=pl.Float64)})])
    params = {
        "dataset": dataset, "task": task, "variant": variant, "seed": seed,
        "scores": str(scores_path), "qrels": str(qrels_path),
        "answers": None if answers_path is None else str(answers_path),
        "gold": None if gold_path is None else str(gold_path),
        "thresholds": None if thresholds_path is None else str(thresholds_path),
        "bsc_k": bsc_k, "bsc_ensembles": ensembles, "reader_k": reader_k,
    }
    write_metrics(metrics, out_path, params)
    return metrics
