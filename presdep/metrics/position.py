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
  Its one-sided permutation test within queries (:func:`score_grade_p_value`) says whether
  a negative mean over queries is more than chance: the score runs against the qrels.
* **variance shares** of the scores of a query over its shuffles, from least squares:
  document = what document means explain (SS_doc / SS_total); slot = what an additive
  slot effect explains beyond them ((SS_doc+slot - SS_doc) / SS_total); residual = the
  rest. Each lies in [0, 1] and they sum to 1.

Undefined values (a constant score or grade vector, fewer than two shuffles) are NaN
and left out of the means, as elsewhere in the metrics.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

# A z of 1.96: the 95% normal interval of a slot's mean (rows treated as independent).
Z95 = 1.959963984540054
# The score-grade test: permutations and a fixed seed (the same scores give the same p-value on
# every machine); 9,999 so that a Bonferroni correction over tens of runs can still reach 0.01.
GRADE_PERMUTATIONS = 9999
GRADE_PERMUTATION_SEED = 4042
# A permuted mean rho equal to the observed one up to float rounding counts as "<=".
_TIE = 1e-12
# Permutations drawn at once per query: bounds memory at (block, n) floats.
_BLOCK = 1000


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


def _centred_ranks(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata  # here, not at the top (see _spearman)

    r = rankdata(x)
    return r - r.mean()


def _joint_orders(parts: Sequence[tuple[np.ndarray, np.ndarray]], cap: int) -> int:
    """The number of joint orders of the queries' grades, or cap + 1 once it exceeds cap."""
    count = 1
    for _, b in parts:
        for k in range(2, b.size + 1):
            count *= k
            if count > cap:
                return cap + 1
    return count


def score_grade_p_value(blocks: Sequence[tuple[np.ndarray, np.ndarray]], permutations: int = GRADE_PERMUTATIONS,
                        seed: int = GRADE_PERMUTATION_SEED) -> float:
    """One-sided p-value of "the score does not run against the qrels" for the mean over queries of
    :func:`score_grade_spearman`; ``blocks``: per query (scores (M, n), grades (n,)). NaN when no
    query has a defined rho.

    Null: each query's grades are permuted among its documents, independently per query. Why not
    one pooled Spearman test over all (score, grade) pairs: documents are clustered by query, so
    pooling would count every document as an independent draw and mix the score level of a query
    with the association inside it, a different statistic from the one reported. Permuting within
    queries keeps each query's scores and grades and breaks only their link, so its null is the
    reported statistic's own distribution when no query's score follows its grades (rho = 0, the
    boundary of "rho >= 0"). p = #{null <= observed} / N over every joint order when there are at
    most ``permutations`` of them (with one query: the exact permutation test of Spearman's rho),
    else (1 + #{null <= observed}) / (1 + permutations) over random ones."""
    parts = []
    for scores, grades in blocks:
        a, b = _centred_ranks(scores.mean(axis=0)), _centred_ranks(np.asarray(grades, dtype=np.float64))
        norm = math.sqrt(float(a @ a) * float(b @ b))
        if norm > 0:  # rho of query q under an order of its grades: (a / norm) @ b[order]
            parts.append((a / norm, b))
    if not parts:
        return math.nan
    observed = sum(float(a @ b) for a, b in parts) / len(parts)
    if _joint_orders(parts, permutations) <= permutations:
        null = np.zeros(1)
        for a, b in parts:  # every joint order: the outer sum of each query's rho over its orders
            rhos = np.array([a @ b[list(order)] for order in itertools.permutations(range(b.size))])
            null = (null[:, None] + rhos[None, :]).ravel()
        return float((null / len(parts) <= observed + _TIE).mean())
    rng = np.random.default_rng(seed)
    null = np.zeros(permutations)
    for a, b in parts:
        for start in range(0, permutations, _BLOCK):
            stop = min(start + _BLOCK, permutations)
            null[start:stop] += rng.permuted(np.tile(b, (stop - start, 1)), axis=1) @ a
    return float((1 + int((null / len(parts) <= observed + _TIE).sum())) / (1 + permutations))


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


__all__ = ["GRADE_PERMUTATIONS", "GRADE_PERMUTATION_SEED", "Z95", "query_blocks", "score_grade_p_value",
           "score_grade_spearman", "slot_profile", "slot_score_spearman", "variance_shares"]
