"""Decision presentations and the first-stage pass (presdep/contracts/views.py) against brute force."""

import itertools

import numpy as np
import polars as pl
import pytest

from presdep.contracts.views import decision_presentations, first_stage_pass


def _scores(n_q=2, n_d=4, n_shuffles=6, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_q):
        docs = [f"d{i}" for i in range(n_d)]
        for i, d in enumerate(docs):  # first-stage pass: position = first-stage rank
            rows.append((f"q{q}", d, "first_stage", 0, i, float(rng.integers(0, 4))))
        for m in range(n_shuffles):
            perm = rng.permutation(n_d)
            for pos, j in enumerate(perm):
                rows.append((f"q{q}", docs[j], "random_shuffle", m, pos, float(rng.integers(0, 4)) / 3))
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "perturbation", "presentation", "position", "score"],
                        orient="row")


def test_k1_returns_the_shuffles_unchanged():
    s = _scores()
    out = decision_presentations(s)
    want = s.filter(pl.col("perturbation") == "random_shuffle").drop("perturbation")
    key = ["query_id", "doc_id", "presentation"]
    joined = out.join(want, on=key, suffix="_w")
    assert joined.height == want.height == out.height
    assert (joined["score"] == joined["score_w"]).all() and (joined["position"] == joined["position_w"]).all()
    assert out.schema["presentation"] == pl.Int32 and out.schema["position"] == pl.Int32


def test_bsc_ensembles_equal_brute_force_means():
    K, E = 3, 2
    s = _scores(n_shuffles=K * E)
    out = decision_presentations(s, bsc_k=K, ensembles=E)
    assert sorted(set(out["presentation"].to_list())) == [0, 1]
    for q, d, e in itertools.product(["q0", "q1"], ["d0", "d1", "d2", "d3"], range(E)):
        raw = [r["score"] for r in s.iter_rows(named=True)
               if r["query_id"] == q and r["doc_id"] == d and r["perturbation"] == "random_shuffle"
               and e * K <= r["presentation"] < (e + 1) * K]
        got = out.filter((pl.col("query_id") == q) & (pl.col("doc_id") == d) & (pl.col("presentation") == e))
        assert got.height == 1
        assert got["score"][0] == pytest.approx(sum(raw) / K, abs=1e-15)
        assert got["position"][0] == int(d[1:])  # first-stage rank


def test_bsc_missing_shuffles_is_an_error_naming_the_query():
    s = _scores(n_shuffles=5)
    with pytest.raises(ValueError, match="presentations 0..5"):
        decision_presentations(s, bsc_k=3, ensembles=2)


def test_first_stage_pass_and_bsc_quality_pass():
    s = _scores(n_shuffles=6)
    fs = first_stage_pass(s)
    assert fs.height == 8 and set(fs["presentation"].to_list()) == {0}
    bsc = first_stage_pass(s, bsc_k=3, ensembles=2)
    e0 = decision_presentations(s, bsc_k=3, ensembles=2).filter(pl.col("presentation") == 0)
    # the same ensemble-0 mean scores; only the tie-break position differs (next test)
    key = ["query_id", "doc_id", "presentation", "score"]
    assert bsc.select(key).sort("query_id", "doc_id").equals(e0.select(key).sort("query_id", "doc_id"))
    assert bsc.schema == e0.schema
    with pytest.raises(ValueError, match="first_stage"):
        first_stage_pass(s.filter(pl.col("perturbation") != "first_stage"))


def test_bsc_quality_pass_breaks_ties_by_doc_id_descending():
    """METHODS v3 item 6: the BSC quality cell ranks as trec_eval does, score descending then
    doc id DESCENDING (byte order, so "d9" > "d10" > "d1"), not by first-stage rank."""
    docs = ["d1", "d10", "d9", "d2"]  # first-stage order, position 0..3
    rows = [("q", d, "first_stage", 0, i, 0.0) for i, d in enumerate(docs)]
    for m in range(2):  # K = 2, E = 1: every mean is 1.0 (all tied)
        for i, d in enumerate(docs):
            rows.append(("q", d, "random_shuffle", m, (i + m) % 4, 1.0 + (0.5 if m == 0 else -0.5)))
    s = pl.DataFrame(rows, schema=["query_id", "doc_id", "perturbation", "presentation", "position", "score"],
                     orient="row")
    out = first_stage_pass(s, bsc_k=2, ensembles=1)
    assert out["score"].to_list() == [1.0] * 4
    ranked = out.sort("position")["doc_id"].to_list()
    assert ranked == ["d9", "d2", "d10", "d1"]  # descending byte order, written out by hand
    # the decision presentations keep the first-stage-rank tie-break
    dp = decision_presentations(s, bsc_k=2, ensembles=1)
    assert dp.sort("position")["doc_id"].to_list() == docs
