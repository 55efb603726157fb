"""Response-selection rows: pair and selection flips, quality of the selected response.

Selected quality = the selected (top) response's grade / the prompt's maximum grade
over its judged responses (qrels); a prompt whose maximum grade is 0 has no
selected quality (null, left out of the means). selected_quality_flip is the mode
flip of that ratio, _mean its mean over presentations, _canonical presentation 0's.
"""

from __future__ import annotations

import math

import numpy as np

from presdep.metrics import decisions
from presdep.metrics.blocks import Block
from presdep.metrics.rows import MetricRows


def add_response_rows(rows: MetricRows, pert: str, bl: list[Block], qrels_d) -> None:
    qids = [b.query_id for b in bl]
    rows.per_query(pert, "pair_flip", qids, [decisions.pair_flip(b.scores, b.doc_ids) for b in bl])
    rows.per_query(pert, "selection_flip", qids, [decisions.selection_flip(b.scores, b.doc_ids) for b in bl])
    judged = [b for b in bl if b.query_id in qrels_d]
    sel = [
        decisions.selected_quality(b.scores, b.doc_ids, [qrels_d[b.query_id].get(d, 0) for d in b.doc_ids],
                                   max_grade=max(qrels_d[b.query_id].values()))
        for b in judged
    ]
    jq = [b.query_id for b in judged]
    undefined = [np.isnan(s).all() for s in sel]  # maximum grade 0: NaN, never a flip of NaNs
    rows.per_query(pert, "selected_quality_flip", jq,
                   [math.nan if u else decisions.mode_flip(s.tolist()) for s, u in zip(sel, undefined)])
    rows.per_query(pert, "selected_quality_mean", jq, [math.nan if u else s.mean() for s, u in zip(sel, undefined)])
    rows.per_query(pert, "selected_quality_canonical", jq, [s[0] for s in sel])
