"""The presentations a decision metric sees, from a ``scores`` table.

A scores file holds raw single-pass scores: the first-stage pass (perturbation
``first_stage``, presentation 0) and random shuffles 0..M-1 (for a BSC variant,
E*K shuffles). Every decision metric (Jaccard, flips, the reader's input) and the
quality cells read the scores through this module, so BSC is defined once:

* ``bsc_k == 1``: presentation m = shuffle m, position = where the doc was shown.
* ``bsc_k = K > 1``: presentation e = ensemble e, whose score for a doc is the mean
  of its scores over shuffles e*K .. (e+1)*K - 1. An averaged score was not shown
  at any one place, so in the decision presentations its tie-break position is the
  doc's first-stage rank (its position in the first-stage pass): one fixed order for
  every ensemble, which keeps ties from flipping between ensembles for no reason. The
  BSC quality pass (:func:`first_stage_pass`) breaks ties the way trec_eval does
  instead: document id descending.

Canonical presentation = presentation 0 (shuffle 0, or ensemble 0 for BSC).
Returned frames have columns query_id, doc_id, presentation (int32), score
(float64), position (int32; smaller = shown earlier, wins ties).
"""

from __future__ import annotations

import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.tasks import FIRST_STAGE

RANDOM_SHUFFLE = "random_shuffle"
# Re-reads of the first-stage presentation in other batch compositions (protocol.noise_rereads):
# a diagnostic of arithmetic noise, not a presentation; metrics, thresholds and the reader skip it.
BATCH_NOISE = "batch_noise"
CANONICAL_PRESENTATION = 0
_NEED = ("query_id", "doc_id", "perturbation", "presentation", "score", "position")
_OUT = {
    "query_id": pl.String,
    "doc_id": pl.String,
    "presentation": pl.Int32,
    "score": pl.Float64,
    "position": pl.Int32,
}


def _check_columns(scores: pl.DataFrame) -> None:
    missing = [c for c in _NEED if c not in scores.columns]
    if missing:
        raise InvalidInput(f"scores lacks column(s) {missing}; expected at least {list(_NEED)}")


def _rows(scores: pl.DataFrame, perturbation: str) -> pl.DataFrame:
    return scores.filter(pl.col("perturbation") == perturbation).select(
        [pl.col(c).cast(t) for c, t in _OUT.items()]
    )


def first_stage_rank(scores: pl.DataFrame) -> pl.DataFrame:
    """(query_id, doc_id, position) of the first-stage pass: the doc's first-stage rank."""
    _check_columns(scores)
    fs = _rows(scores, FIRST_STAGE)
    if fs.height == 0:
        raise InvalidInput(
            f"scores have no {FIRST_STAGE!r} rows (the first-stage pass); every scored variant "
            f"needs it for its quality cells and BSC tie-breaks"
        )
    extra = fs.filter(pl.col("presentation") != 0)
    if extra.height:
        r = extra.row(0, named=True)
        raise InvalidInput(
            f"scores: query {r['query_id']!r} has first_stage presentation {r['presentation']}; "
            f"the first-stage pass is presentation 0 only"
        )
    return fs.select("query_id", "doc_id", "position")


def decision_presentations(
    scores: pl.DataFrame,
    *,
    bsc_k: int = 1,
    ensembles: int = 4,
    perturbation: str = RANDOM_SHUFFLE,
) -> pl.DataFrame:
    """The presentations decision metrics compare (see the module doc for BSC)."""
    _check_columns(scores)
    if bsc_k < 1:
        raise InvalidInput(f"bsc_k must be >= 1, got {bsc_k}")
    rows = _rows(scores, perturbation)
    if bsc_k == 1:
        return rows.sort("query_id", "presentation", "position", "doc_id")
    if ensembles < 1:
        raise InvalidInput(f"BSC needs at least one ensemble, got {ensembles}")
    need = ensembles * bsc_k
    have = rows.group_by("query_id").agg(
        pl.col("presentation").n_unique().alias("n"),
        pl.col("presentation").max().alias("max"),
        pl.col("presentation").min().alias("min"),
    )
    short = have.filter((pl.col("n") < need) | (pl.col("min") != 0) | (pl.col("max") < need - 1))
    if short.height or have.height == 0:
        qid = short["query_id"][0] if short.height else None
        n = int(short["n"][0]) if short.height else 0
        raise InvalidInput(
            f"BSC with K = {bsc_k} and {ensembles} ensembles needs {perturbation} presentations "
            f"0..{need - 1} of every query; query {qid!r} has {n}"
        )
    rank = first_stage_rank(scores)
    mean = (
        rows.filter(pl.col("presentation") < need)
        .with_columns((pl.col("presentation") // bsc_k).cast(pl.Int32).alias("presentation"))
        .group_by("query_id", "doc_id", "presentation")
        .agg(pl.col("score").mean(), pl.len().alias("n"))
    )
    bad = mean.filter(pl.col("n") != bsc_k)
    if bad.height:
        r = bad.row(0, named=True)
        raise InvalidInput(
            f"scores: query {r['query_id']!r} doc {r['doc_id']!r} has {r['n']} scores in BSC "
            f"ensemble {r['presentation']}, expected K = {bsc_k}"
        )
    out = mean.join(rank, on=["query_id", "doc_id"], how="left")
    lost = out.filter(pl.col("position").is_null())
    if lost.height:
        r = lost.row(0, named=True)
        raise InvalidInput(
            f"scores: query {r['query_id']!r} doc {r['doc_id']!r} has no first-stage pass row "
            f"(BSC ties are broken by first-stage rank)"
        )
    return out.select([pl.col(c).cast(t) for c, t in _OUT.items()]).sort(
        "query_id", "presentation", "position", "doc_id"
    )


def first_stage_pass(scores: pl.DataFrame, *, bsc_k: int = 1, ensembles: int = 4) -> pl.DataFrame:
    """The pass the quality cells come from, as one presentation (0) per query.

    ``bsc_k == 1``: the first-stage pass itself (K = 1, the deployment case).
    BSC (``bsc_k > 1``): the BSC scores of ensemble 0 (mean over shuffles 0..K-1),
    the deployed BSC scorer's output. A BSC score has no single presentation, so its
    ranking follows trec_eval (docs/methods/bsc.md): score descending, then doc id
    DESCENDING (byte order, as strcmp). ``position`` here is the doc's rank in
    descending doc-id order within its query, so the usual (-score, position) order
    is exactly trec_eval's. (BSC's decision presentations keep the first-stage-rank
    tie-break.)
    """
    if bsc_k == 1:
        rank = first_stage_rank(scores)  # validates presence and presentation 0
        fs = _rows(scores, FIRST_STAGE)
        assert fs.height == rank.height
        return fs.sort("query_id", "position", "doc_id")
    dp = decision_presentations(scores, bsc_k=bsc_k, ensembles=ensembles)
    e0 = dp.filter(pl.col("presentation") == CANONICAL_PRESENTATION)
    by_id_desc = (pl.col("doc_id").rank("ordinal", descending=True).over("query_id") - 1).cast(pl.Int32)
    return e0.with_columns(by_id_desc.alias("position")).sort("query_id", "position")
