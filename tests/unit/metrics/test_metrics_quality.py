"""nDCG through pytrec_eval against a hand computation from the formula (trec_eval semantics)."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import numpy as np
import pytest
import pytrec_eval

from presdep.contracts.errors import InvalidInput
from presdep.data.guards import MAX_GRADE
from presdep.metrics.quality import (
    evaluate_presentations,
    ndcg_presentations,
    ndcg_runs,
    relevance_evaluator,
    strict_scores,
    trec_order,
)


def hand_ndcg(ranked: list[str], judged: dict[str, int], k: int) -> float:
    """trec_eval nDCG@k from the definition: linear gain, 1/log2(rank+1), IDCG over ALL judged docs."""
    dcg = sum(judged.get(d, 0) / math.log2(r + 2) for r, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def trec_sorted(run: dict[str, float]) -> list[str]:
    """Score descending, ties by doc id descending (trec_eval's comparator)."""
    return sorted(run, key=lambda d: (run[d], d), reverse=True)


def read_qrels(path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for line in open(path):
        q, _, d, g = line.split()
        out[q][d] = int(g)
    return dict(out)


def read_run(path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for line in open(path):
        q, _, d, _rank, s, _tag = line.split()
        out[q][d] = float(s)
    return dict(out)


@pytest.fixture(scope="module")
def dl19(shared_data):
    base = shared_data / "trec-dl19"
    return read_qrels(base / "qrels.dl19-passage.txt"), read_run(base / "bm25_trec_run_dl19_top100.txt")


def test_identity_bm25_run_reproduces_published_ndcg(dl19):
    qrels, run = dl19
    got = ndcg_runs(run, qrels, 10)
    assert len(got) == 43
    assert round(float(np.mean(list(got.values()))), 4) == 0.5058


def test_ndcg_matches_hand_computation_on_dl19(dl19):
    qrels, run = dl19
    got = ndcg_runs(run, qrels, 10)
    for q, docs in run.items():
        assert got[q] == pytest.approx(hand_ndcg(trec_sorted(docs), qrels[q], 10), abs=1e-12), q


def test_idcg_uses_all_judged_docs_not_just_the_pool(dl19):
    qrels, _ = dl19
    q = next(q for q, j in qrels.items() if sum(g > 0 for g in j.values()) > 12)
    judged = qrels[q]
    # A perfect ordering of only SOME relevant docs: the missing ones still count in IDCG.
    rel = sorted((d for d in judged if judged[d] > 0), key=lambda d: (-judged[d], d))
    pool = rel[1:8] + [d for d in judged if judged[d] == 0][:5]
    run = {d: float(len(pool) - i) for i, d in enumerate(pool)}
    got = ndcg_runs({q: run}, qrels, 10)[q]
    assert got == pytest.approx(hand_ndcg(trec_sorted(run), judged, 10), abs=1e-12)
    assert got < 1.0


def test_ties_are_broken_by_doc_id_descending(dl19):
    qrels, _ = dl19
    q = next(iter(qrels))
    judged = qrels[q]
    hi = max(judged, key=lambda d: (judged[d], d))
    lo = next(d for d in sorted(judged) if judged[d] < judged[hi])
    others = [d for d in judged if d not in (hi, lo)][:15]
    # The two docs tie at the top; everything else far below.
    run = {hi: 5.0, lo: 5.0, **{d: 1.0 - i * 0.01 for i, d in enumerate(others)}}
    desc = sorted([hi, lo], reverse=True)
    expected = hand_ndcg(desc + others, judged, 10)
    wrong = hand_ndcg(sorted([hi, lo]) + others, judged, 10)
    assert expected != pytest.approx(wrong)  # doc-id order matters for this case
    got = ndcg_runs({q: run}, qrels, 10)[q]
    assert got == pytest.approx(expected, abs=1e-12)
    # pytrec_eval's own tie-break on the raw tied scores agrees (the explicit order is trec_eval's).
    raw = pytrec_eval.RelevanceEvaluator({q: judged}, {"ndcg_cut.10"}).evaluate({q: run})
    assert raw[q]["ndcg_cut_10"] == pytest.approx(expected, abs=1e-12)
    # Independent of the order the run lists its docs in.
    items = list(run.items())
    for seed in range(5):
        random.Random(seed).shuffle(items)
        assert ndcg_runs({q: dict(items)}, qrels, 10)[q] == pytest.approx(expected, abs=1e-12)


def test_strict_scores_reproduce_trec_order():
    ids = ["b", "a", "c", "d"]
    s = np.array([[1.0, 1.0, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    # row 0: c first (2.0), then the 1.0 tie by id desc: d, b, a
    np.testing.assert_array_equal(strict_scores(s, ids)[0], [2.0, 1.0, 4.0, 3.0])
    # row 1: all tied: d, c, b, a
    assert [ids[i] for i in trec_order(s, ids)[1]] == ["d", "c", "b", "a"]
    with pytest.raises(ValueError, match="NaN"):
        strict_scores(np.array([np.nan, 1.0]), ["x", "y"])


def test_per_presentation_ndcg_and_cutoff_one(dl19):
    qrels, run = dl19
    qids = sorted(run)[:5]
    doc_ids, blocks = [], []
    rng = np.random.default_rng(0)
    for q in qids:
        ids = sorted(run[q])
        doc_ids.append(ids)
        blocks.append(rng.integers(0, 4, size=(3, len(ids))).astype(float))  # many ties
    for k in (1, 10):
        got = ndcg_presentations(qids + ["not-judged"], doc_ids + [["x"]], blocks + [np.ones((3, 1))], qrels, k)
        assert "not-judged" not in got
        for q, ids, b in zip(qids, doc_ids, blocks):
            for m in range(3):
                expected = hand_ndcg(trec_sorted(dict(zip(ids, b[m]))), qrels[q], k)
                assert got[q][m] == pytest.approx(expected, abs=1e-12)


def test_top_k_truncation_gives_the_full_run_value(dl19):
    """ndcg_presentations hands pytrec_eval only the top k; the full run must give the same."""
    qrels, run = dl19
    qids = sorted(run)[:10]
    rng = np.random.default_rng(2)
    ids = [sorted(run[q]) for q in qids]
    blocks = [rng.random((2, len(i))).round(1) for i in ids]  # rounding makes ties
    got = ndcg_presentations(qids, ids, blocks, qrels, 10)
    for m in range(2):
        full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(
            {q: dict(zip(i, strict_scores(b[m], i).tolist())) for q, i, b in zip(qids, ids, blocks)}
        )
        for q in qids:
            assert got[q][m] == pytest.approx(full[q]["ndcg_cut_10"], abs=1e-12)
    # unsorted doc ids (no ids_sorted promise) give the same values
    perm = [rng.permutation(len(i)) for i in ids]
    got2 = ndcg_presentations(qids, [[i[j] for j in p] for i, p in zip(ids, perm)],
                              [b[:, p] for b, p in zip(blocks, perm)], qrels, 10)
    for q in qids:
        np.testing.assert_allclose(got2[q], got[q], atol=1e-12)


@pytest.mark.parametrize("call", ["runs", "presentations", "evaluate"])
def test_a_grade_above_the_maximum_is_refused_before_trec_eval_allocates(call):
    """A qrels table that bypassed the readers (Parquet, a user's dict): trec_eval would keep a
    counter per grade level, 16 GB for a grade of 2**31 - 1; refused naming the query and doc."""
    qrels = {"q1": {"a": 1, "b": 2**31 - 1}}
    scores = np.array([[2.0, 1.0]])
    runs = {
        "runs": lambda: ndcg_runs({"q1": {"a": 2.0, "b": 1.0}}, qrels),
        "presentations": lambda: ndcg_presentations(["q1"], [["a", "b"]], [scores], qrels),
        "evaluate": lambda: evaluate_presentations(["q1"], [["a", "b"]], [scores], [np.array([[0, 1]])], qrels,
                                                   ["ndcg@10"]),
    }
    with pytest.raises(InvalidInput, match=r"query 'q1' doc 'b': grade 2147483647 is above the maximum 65535"):
        runs[call]()


def test_the_largest_grade_scores_as_trec_eval_does():
    qrels = {"q1": {"a": 1, "b": MAX_GRADE}}
    ours = relevance_evaluator(qrels, {"ndcg_cut.10"}).evaluate({"q1": {"a": 2.0, "b": 1.0}})
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate({"q1": {"a": 2.0, "b": 1.0}})
    assert ours == theirs and 0 < ours["q1"]["ndcg_cut_10"] < 1
