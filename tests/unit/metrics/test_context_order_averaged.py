"""The context decomposition's order-averaged reading: each document's MEAN score over the shuffles,
one ranking of those means (ties by first-stage rank), nDCG@10 of it; the score-level terms on the
same per-document means. A hand case where the mean of per-shuffle nDCG would differ, and a
randomized case against nDCG computed here from its definition."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from presdep.contracts.errors import InvalidInput
from presdep.metrics.context import context_metrics

COLUMNS = ["query_id", "doc_id", "arm", "presentation", "first_stage_rank", "score"]
ARMS = ("A1", "A2", "A3", "A4")


def _frame(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, orient="row", schema={"query_id": pl.String, "doc_id": pl.String, "arm": pl.String,
                                                    "presentation": pl.Int32, "first_stage_rank": pl.Int32,
                                                    "score": pl.Float64})


def _values(m: pl.DataFrame, perturbation: str) -> dict[tuple[str, str], float]:
    part = m.filter((pl.col("perturbation") == perturbation) & pl.col("query_id").is_not_null())
    return {(q, metric): v for q, metric, v in part.select("query_id", "metric", "value").iter_rows()}


# Hand case: d1 relevant (grade 1), d2 and d3 not. In A2 and A3, d1 is SECOND in both shuffles
# (score 0.9 behind a 1.0) but first on its mean score (0.9 against 0.5 and 0.5).
HAND_QRELS = {"q": {"d1": 1, "d2": 0, "d3": 0}}
HAND_READS = {  # (arm, presentation) -> scores of d1, d2, d3 (first-stage ranks 1, 2, 3)
    ("A1", -1): (1.0, 0.5, 0.0),
    ("A2", -1): (0.9, 1.0, 0.0), ("A2", 0): (0.9, 1.0, 0.0), ("A2", 1): (0.9, 0.0, 1.0),
    ("A3", -1): (0.9, 0.0, 1.0), ("A3", 0): (0.9, 0.0, 1.0), ("A3", 1): (0.9, 1.0, 0.0),
    ("A4", -1): (1.0, 0.0, 0.0), ("A4", 0): (1.0, 0.0, 0.0), ("A4", 1): (1.0, 0.0, 0.0),
}


def _hand_scores() -> pl.DataFrame:
    return _frame([("q", d, arm, pres, rank, s) for (arm, pres), vals in HAND_READS.items()
                   for rank, (d, s) in enumerate(zip(("d1", "d2", "d3"), vals), start=1)])


def test_hand_case_ranks_the_mean_scores_once():
    got = _values(context_metrics(_hand_scores(), HAND_QRELS, dataset="toy", variant="v"), "context_shuffled")
    # A2's mean scores d1 0.9, d2 0.5, d3 0.5: d1 at rank 1, DCG = 1 / log2(2) = 1, ideal 1 -> 1.0
    # (the mean of the per-shuffle nDCG would be 1 / log2(3) = 0.6309: d1 is second in each shuffle)
    assert got[("q", "ndcg10_A2")] == pytest.approx(1.0)
    assert got[("q", "ndcg10_A3")] == pytest.approx(1.0)
    assert got[("q", "ndcg10_A1")] == pytest.approx(1.0)
    assert got[("q", "ndcg10_A4")] == pytest.approx(1.0)
    for term in ("width", "companion_content", "companion_presence", "skeleton"):
        assert got[("q", term)] == pytest.approx(0.0, abs=1e-12)
    # A2 - A1 on the mean scores: d1 0.9 - 1.0, d2 0.5 - 0.5, d3 0.5 - 0.0 -> signed 0.4 / 3, absolute 0.6 / 3
    # (per document and shuffle: |-0.1|, |0.5|, |0|, |-0.1|, |-0.5|, |1| -> 2.2 / 6 instead)
    assert got[("q", "score_width")] == pytest.approx(0.4 / 3)
    assert got[("q", "score_width_abs")] == pytest.approx(0.6 / 3)
    # A2 and A3 have the same mean scores (0.9, 0.5, 0.5): both differences 0
    # (per document and shuffle the absolute difference would be 4 / 6)
    assert got[("q", "score_companion_content")] == pytest.approx(0.0, abs=1e-12)
    assert got[("q", "score_companion_content_abs")] == pytest.approx(0.0, abs=1e-12)
    # A3 - A4: d1 0.9 - 1, d2 0.5 - 0, d3 0.5 - 0 -> signed 0.9 / 3, absolute 1.1 / 3
    assert got[("q", "score_companion_presence")] == pytest.approx(0.9 / 3)
    assert got[("q", "score_companion_presence_abs")] == pytest.approx(1.1 / 3)


def test_hand_case_canonical_reading_is_the_canonical_order_alone():
    got = _values(context_metrics(_hand_scores(), HAND_QRELS, dataset="toy", variant="v"), "context_canonical")
    # A2 canonical: d2 1.0, d1 0.9, d3 0.0 -> d1 at rank 2: 1 / log2(3)
    assert got[("q", "ndcg10_A2")] == pytest.approx(1 / math.log2(3))
    assert got[("q", "width")] == pytest.approx(1 / math.log2(3) - 1.0)
    # A2 - A1 canonical: -0.1, 0.5, 0.0
    assert got[("q", "score_width_abs")] == pytest.approx(0.6 / 3)


def _reference_ndcg(mean: np.ndarray, first_stage: np.ndarray, grades_in_pool: np.ndarray,
                    all_judged: list[int], k: int = 10) -> float:
    """nDCG@k from its definition: sort by mean score descending, ties by first-stage rank; linear
    gain, discount log2(rank + 1); the ideal from every judged document of the query."""
    order = np.lexsort((first_stage, -mean))[:k]
    dcg = sum(grades_in_pool[j] / math.log2(r + 2) for r, j in enumerate(order))
    ideal = sorted(all_judged, reverse=True)[:k]
    idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
    return dcg / idcg


def _random_case(seed: int):
    rng = np.random.default_rng(seed)
    n_docs, n_shuffles = 14, 10
    rows, qrels, truth = [], {}, {}
    for qi in range(4):
        qid = f"q{qi}"
        docs = [f"q{qi}-doc{j:02d}" for j in range(n_docs)]
        first_stage = rng.permutation(n_docs) + 1  # not the doc-id order, so the tie rule shows
        grades = rng.integers(0, 4, size=n_docs)
        grades[rng.integers(n_docs)] = 3  # every query has a relevant document
        judged = rng.random(n_docs) < 0.8  # the rest are unjudged: gain 0
        qrels[qid] = {d: int(g) for d, g, j in zip(docs, grades, judged) if j}
        qrels[qid]["outside-the-pool"] = 2  # judged, never scored: in the ideal ranking only
        gains = np.where(judged, grades, 0)
        for arm in ARMS:
            # quarter steps: many exact ties among the means, broken by first-stage rank
            shuffle_scores = rng.integers(0, 5, size=(n_shuffles, n_docs)) / 4
            canonical = rng.integers(0, 5, size=n_docs) / 4
            if arm == "A1":
                mean = canonical
                reads = {-1: canonical}
            else:
                mean = shuffle_scores.mean(axis=0)
                reads = {-1: canonical, **{s: shuffle_scores[s] for s in range(n_shuffles)}}
            for pres, vals in reads.items():
                rows += [(qid, d, arm, pres, int(r), float(v)) for d, r, v in zip(docs, first_stage, vals)]
            truth[(qid, arm)] = (mean, _reference_ndcg(mean, first_stage, gains, list(qrels[qid].values())))
    order = rng.permutation(len(rows))  # the reading must not depend on row order
    return _frame([rows[i] for i in order]), qrels, truth


@pytest.mark.parametrize("seed", [1, 2])
def test_random_case_against_ndcg_from_its_definition(seed):
    scores, qrels, truth = _random_case(seed)
    got = _values(context_metrics(scores, qrels, dataset="toy", variant="v"), "context_shuffled")
    terms = {"width": ("A2", "A1"), "companion_content": ("A2", "A3"), "companion_presence": ("A3", "A4"),
             "skeleton": ("A4", "A1")}
    for qid in sorted({q for q, _ in truth}):
        for arm in ARMS:
            assert got[(qid, f"ndcg10_{arm}")] == pytest.approx(truth[(qid, arm)][1], abs=1e-9), (qid, arm)
        for term, (a, b) in terms.items():
            assert got[(qid, term)] == pytest.approx(truth[(qid, a)][1] - truth[(qid, b)][1], abs=1e-9)
            diff = truth[(qid, a)][0] - truth[(qid, b)][0]  # per-document mean scores, docs aligned
            assert got[(qid, f"score_{term}")] == pytest.approx(diff.mean(), abs=1e-12)
            assert got[(qid, f"score_{term}_abs")] == pytest.approx(np.abs(diff).mean(), abs=1e-12)


def test_a_shuffle_missing_a_document_is_refused():
    scores = _hand_scores().filter(~((pl.col("arm") == "A3") & (pl.col("presentation") == 1)
                                     & (pl.col("doc_id") == "d2")))
    with pytest.raises(InvalidInput, match=r"arm A3, query 'q'.*every document in every shuffle"):
        context_metrics(scores, HAND_QRELS, dataset="toy", variant="v")
