"""Where a batched scorer's scores come from: the document, or the slot it was shown in.

A tau-PSI alone cannot say why rankings move. These diagnostics, computed on the raw
single-pass scores of the random shuffles (one row per document per shuffle, with the slot
it sat in inside its prompt), say whether the score follows the document or the slot
(docs/methods/position.md):

* **slot profile**: the mean score at each slot, raw and centred (each score minus its
  document's mean over the shuffles, so the document's own level cancels), with a 95%
  normal interval over the (query, shuffle) rows at that slot, as if they were independent
  (presdep.metrics.slot_test gives the query-clustered interval and the permutation test of
  "no slot effect", with the slot share's chance level). A scorer that reads
  documents, not slots, has a flat centred profile; the identity scorer's is exactly 0.
* **Spearman(slot, score)** within each shuffle, averaged per query: near -1 when the
  first slots always score highest, whatever sits there.
* **Spearman(mean score, grade)**: each document's score averaged over the shuffles
  against its qrels grade (unjudged = 0), per query: does the score follow relevance?
* **variance shares** of the scores of a query over its shuffles, from least squares:
  document = what document means explain (SS_doc / SS_total); slot = what an additive
  slot effect explains beyond them ((SS_doc+slot - SS_doc) / SS_total); residual = the
  rest. Each lies in [0, 1] and they sum to 1.

Undefined values (a constant score or grade vector, fewer than two shuffles) are NaN
and left out of the means, as elsewhere in the metrics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

# A z of 1.96: the 95% normal interval of a slot's mean (rows treated as independent).
Z95 = 1.959963984540054


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho with average ranks for ties; NaN when either side is constant."""
    from scipy.stats import rankdata  # here, not at the top: scipy.stats costs every metrics job ~1.5 s

    rx, ry = rankdata(x), rankdata(y)
    sx, sy = rx.std(), ry.std()
    if sx == 0 or sy == 0:
        return math.nan
    return float(((rx - rx.mean()) * (ry - ry.mean())).mean() / (sx * sy))


def slot_score_spearman(scores: np.ndarray, slots: np.ndarray) -> float:
    """Mean over shuffles of Spearman(slot, score); ``scores``/``slots`` (M, n)."""
    vals = [_spearman(slots[m], scores[m]) for m in range(scores.shape[0])]
    vals = [v for v in vals if not math.isnan(v)]
    return float(np.mean(vals)) if vals else math.nan


def score_grade_spearman(scores: np.ndarray, grades: np.ndarray) -> float:
    """Spearman of each document's mean score over the shuffles with its grade."""
    return _spearman(scores.mean(axis=0), np.asarray(grades, dtype=np.float64))


def variance_shares(scores: np.ndarray, slots: np.ndarray) -> tuple[float, float, float]:
    """(document, slot, residual) shares of the score variance of one query's (M, n) shuffles."""
    m, n = scores.shape
    y = scores.ravel()
    total = float(((y - y.mean()) ** 2).sum())
    if m < 2 or total == 0:
        return math.nan, math.nan, math.nan
    doc = np.tile(np.arange(n), m)
    slot = slots.ravel()
    doc_fit = scores.mean(axis=0)[doc]
    ss_doc = float(((doc_fit - y.mean()) ** 2).sum())
    # Additive model doc + slot by least squares (one-hot columns, the rank deficiency is harmless).
    levels = np.unique(slot)
    x = np.concatenate([np.eye(n)[doc], (slot[:, None] == levels[None, :]).astype(np.float64)], axis=1)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    fit = x @ coef
    ss_model = float(((fit - y.mean()) ** 2).sum())
    doc_share = min(1.0, ss_doc / total)
    slot_share = min(1.0 - doc_share, max(0.0, (ss_model - ss_doc) / total))
    return doc_share, slot_share, max(0.0, 1.0 - doc_share - slot_share)


def slot_profile(blocks: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, list[float]]:
    """Per slot over all queries' (scores, slots) blocks: mean, centred mean and 95% half-widths, rows."""
    raw: dict[int, list[float]] = {}
    centred: dict[int, list[float]] = {}
    for scores, slots in blocks:
        dev = scores - scores.mean(axis=0, keepdims=True)
        for s, v, c in zip(slots.ravel(), scores.ravel(), dev.ravel()):
            raw.setdefault(int(s), []).append(float(v))
            centred.setdefault(int(s), []).append(float(c))
    out: dict[str, list[float]] = {"slot": [], "mean": [], "ci95": [], "centred_mean": [], "centred_ci95": [],
                                   "rows": []}
    for s in sorted(raw):
        r, c = np.asarray(raw[s]), np.asarray(centred[s])
        half = (lambda a: Z95 * a.std(ddof=1) / math.sqrt(a.size) if a.size > 1 else math.nan)
        out["slot"].append(float(s))
        out["mean"].append(float(r.mean()))
        out["ci95"].append(half(r))
        out["centred_mean"].append(float(c.mean()))
        out["centred_ci95"].append(half(c))
        out["rows"].append(float(r.size))
    return out


def query_blocks(rows: Mapping[str, Sequence], grades: Mapping[str, Mapping[str, int]]
                 ) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """(query, scores (M, n), slots (M, n), grades (n,)) per query from columns query_id, doc_id,
    presentation, slot, score of the random shuffles (every shuffle holds every document once)."""
    by_q: dict[str, dict[tuple[int, str], tuple[float, int]]] = {}
    for q, d, m, s, v in zip(rows["query_id"], rows["doc_id"], rows["presentation"], rows["slot"], rows["score"]):
        by_q.setdefault(str(q), {})[(int(m), str(d))] = (float(v), int(s))
    out = []
    for q in sorted(by_q):
        cells = by_q[q]
        docs = sorted({d for _, d in cells})
        pres = sorted({m for m, _ in cells})
        sc = np.array([[cells[(m, d)][0] for d in docs] for m in pres])
        sl = np.array([[cells[(m, d)][1] for d in docs] for m in pres])
        g = np.array([grades.get(q, {}).get(d, 0) for d in docs], dtype=np.float64)
        out.append((q, sc, sl, g))
    return out


__all__ = ["Z95", "query_blocks", "score_grade_spearman", "slot_profile", "slot_score_spearman",
           "variance_shares"]
