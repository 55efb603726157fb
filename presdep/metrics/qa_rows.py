"""QA rows: where the gold paragraphs land (the reader's top k) and the reader's answers."""

from __future__ import annotations

import logging
import math

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.views import CANONICAL_PRESENTATION
from presdep.metrics import qa, quality
from presdep.metrics.blocks import Block
from presdep.metrics.rows import MetricRows

log = logging.getLogger(__name__)


def add_gold_slot_rows(rows: MetricRows, pert: str, bl: list[Block], qrels_d, k: int) -> None:
    """Where the gold (grade >= 1) paragraphs land in each presentation's score order.

    Each presentation is read in the reader's order (-score, presented position) and
    its gold slot is the 0-based slot of its best-placed gold paragraph.

    * gold_in_top{k}: share of presentations whose top k hold AT LEAST ONE gold
      paragraph (gold slot < k).
    * gold_slot_mean: mean gold slot over the presentations where it lies within the
      top k; gold_slot_var: population variance of it over those presentations. Both
      NaN (null) for a query whose gold paragraphs never reach the top k.

    Queries without a gold paragraph in the pool are left out.
    """
    qids, top, smean, svar = [], [], [], []
    for b in bl:
        gold = np.array([qrels_d.get(b.query_id, {}).get(d, 0) >= 1 for d in b.doc_ids], dtype=bool)
        if not gold.any():
            continue
        order = quality.presented_order(b.scores, b.positions)
        slot = order.argsort(axis=1)  # (M, n) 0-based slot of each doc
        best = slot[:, gold].min(axis=1)  # (M,) slot of the best-placed gold paragraph
        within = best < k
        qids.append(b.query_id)
        top.append(float(within.mean()))
        smean.append(float(best[within].mean()) if within.any() else math.nan)
        svar.append(float(best[within].var()) if within.any() else math.nan)
    rows.per_query(pert, f"gold_in_top{k}", qids, top)
    rows.per_query(pert, "gold_slot_mean", qids, smean)
    rows.per_query(pert, "gold_slot_var", qids, svar)


def add_answer_rows(rows: MetricRows, answers: pl.DataFrame, gold: pl.DataFrame | None) -> None:
    """answer_flip per perturbation (0 for a query with one answer); with gold answers,
    canonical (presentation 0) EM and F1 and their means over presentations."""
    need = {"query_id", "perturbation", "presentation", "answer"}
    if need - set(answers.columns):
        raise InvalidInput(f"answers lacks column(s) {sorted(need - set(answers.columns))}")
    golds: dict[str, list[str]] = {}
    if gold is not None:
        if {"query_id", "answer"} - set(gold.columns):
            raise InvalidInput("gold answers need columns query_id, answer")
        for q, a in gold.select(pl.col("query_id").cast(pl.String), "answer").iter_rows():
            golds.setdefault(q, []).append(a)
    a = answers.select(
        pl.col("query_id").cast(pl.String), pl.col("perturbation").cast(pl.String), "presentation", "answer"
    )
    dup = a.select(["perturbation", "query_id", "presentation"]).is_duplicated()
    if dup.any():
        r = a.row(int(dup.arg_max()), named=True)
        raise InvalidInput(
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
