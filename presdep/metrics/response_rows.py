"""Response-selection rows: pair and selection flips, quality of the selected response."""

from __future__ import annotations

from presdep.metrics import decisions
from presdep.metrics.blocks import Block
from presdep.metrics.rows import MetricRows


def add_response_rows(rows: MetricRows, pert: str, bl: list[Block], qrels_d) -> None:
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
