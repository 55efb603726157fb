"""The threshold artifact: the 50/50 split and t* tuned on the development half."""

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from presdep.contracts.errors import SchemaError
from presdep.contracts.schemas import REBUILD_HINT, write_table
from presdep.metrics.thresholds import (
    read_thresholds,
    split_queries,
    thresholds_from_files,
    tune_thresholds,
    write_thresholds,
)


def _reference_split(ids, seed=20260610):
    """METHODS v3 item 3, from its text: the sorted ids shuffled in place by numpy's
    default_rng(seed).shuffle; development = the first max(1, round(0.5 n)), half to even."""
    order = sorted(ids)
    np.random.default_rng(seed).shuffle(order)
    n_dev = max(1, round(0.5 * len(order)))
    return sorted(order[:n_dev]), sorted(order[n_dev:])


@settings(max_examples=50, deadline=None)
@given(st.sets(st.text(min_size=1, max_size=6), min_size=1, max_size=40), st.integers(0, 2**31))
def test_split_is_deterministic_disjoint_covering_and_half(ids, seed):
    ids = list(ids)
    dev, test = split_queries(ids, seed)
    assert (dev, test) == split_queries(list(reversed(ids)), seed)  # order of input is irrelevant
    assert not set(dev) & set(test) and set(dev) | set(test) == set(ids)
    n = len(ids)
    n_dev = max(1, int(n / 2) + (n % 4 == 3))  # round half to even of n / 2, by hand
    assert len(dev) == n_dev and len(test) == n - n_dev
    assert (dev, test) == _reference_split(ids, seed)


def test_split_sizes_round_half_to_even():
    # n = 1: max(1, round(0.5)) = max(1, 0) = 1 development, 0 test
    assert split_queries(["only"]) == (["only"], [])
    # n = 5: round(2.5) = 2 (half to even), not 3
    dev, test = split_queries([f"q{i}" for i in range(5)])
    assert (len(dev), len(test)) == (2, 3)
    # n = 7: round(3.5) = 4
    dev, test = split_queries([f"q{i}" for i in range(7)])
    assert (len(dev), len(test)) == (4, 3)


def test_split_follows_numpy_default_rng_shuffle_of_sorted_ids():
    ids = [f"q{i}" for i in range(10)]
    order = sorted(ids)  # q0, q1, ..., q9 (string order)
    np.random.default_rng(20260610).shuffle(order)
    assert split_queries(ids) == (sorted(order[:5]), sorted(order[5:]))
    # a Python list and an object array get the same permutation from the same generator
    arr = np.array(sorted(ids), dtype=object)
    np.random.default_rng(20260610).shuffle(arr)
    assert arr.tolist() == order
    assert split_queries(ids, 1) != split_queries(ids)  # the seed matters
    # sorting is by string, so "q10" sorts before "q2": the input order never matters
    more = [f"q{i}" for i in range(12)]
    assert split_queries(more) == _reference_split(more)


# The 22 development queries METHODS' rule gives for the 43 judged DL19 queries
# (numpy default_rng(20260610).shuffle of the sorted ids, first round(21.5) = 22).
DL19_DEV = ["1037798", "1110199", "1112341", "1113437", "1114819", "1115776", "1117099", "1121402", "1129237",
            "1133167", "131843", "146187", "148538", "183378", "19335", "405717", "443396", "47923", "527433",
            "573724", "915593", "962179"]


def test_split_of_the_43_dl19_queries_is_22_development_21_test(shared_data):
    qrels = shared_data / "trec-dl19" / "qrels.dl19-passage.txt"
    if not qrels.is_file():
        pytest.skip(f"{qrels} not available")
    qids = sorted({line.split()[0] for line in qrels.read_text().splitlines() if line.strip()})
    assert len(qids) == 43
    dev, test = split_queries(qids)
    assert (len(dev), len(test)) == (22, 21)
    assert dev == DL19_DEV
    assert (dev, test) == _reference_split(qids)


def _scores(per_query: dict[str, list[list[float]]]) -> pl.DataFrame:
    rows = []
    for q, pres in per_query.items():
        docs = [f"{q}-d{i}" for i in range(len(pres[0]))]
        for i, d in enumerate(docs):
            rows.append((q, d, "first_stage", 0, i, 0.0))
        for m, sc in enumerate(pres):
            for i, (d, s) in enumerate(zip(docs, sc)):
                rows.append((q, d, "random_shuffle", m, (i + m) % len(docs), float(s)))
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "perturbation", "presentation", "position", "score"],
                        orient="row")


def _brute_t_star(all_canon: dict[str, list[float]], dev: list[str], relevant: dict[str, set[int]]) -> float:
    """METHODS v3: 41 evenly spaced values from min to max of the canonical scores of ALL
    queries; mean set-F1 over the DEVELOPMENT queries, no relevant -> 0; walking the grid
    upwards, ``>=`` the best so far wins (exact ties to the higher threshold)."""
    pooled = [s for v in all_canon.values() for s in v]
    grid = np.linspace(min(pooled), max(pooled), 41).tolist()
    best, best_t = -1.0, None
    for t in grid:
        f1s = []
        for q in dev:
            kept = {i for i, s in enumerate(all_canon[q]) if s >= t}
            rel = relevant.get(q, set())
            f1s.append(0.0 if not rel else 2 * len(kept & rel) / (len(kept) + len(rel)))
        f = sum(f1s) / len(f1s)
        if f >= best:
            best, best_t = f, t
    return best_t


def test_t_star_is_tuned_on_the_development_half_canonical_presentation():
    rng = np.random.default_rng(3)
    per_query = {f"q{i}": rng.integers(0, 7, (3, 6)).astype(float).tolist() for i in range(12)}
    scores = _scores(per_query)
    rel = {f"q{i}": {0, 2} for i in range(0, 12, 2)}  # odd queries have no relevant doc
    qrels = pl.DataFrame([(q, f"{q}-d{i}", 1) for q, s in rel.items() for i in s],
                         schema=["query_id", "doc_id", "relevance"], orient="row")
    art = tune_thresholds(scores, qrels)
    dev, test = _reference_split(list(per_query))
    assert (art["dev_queries"], art["test_queries"]) == (dev, test)
    want = _brute_t_star({q: v[0] for q, v in per_query.items()}, dev, rel)
    assert art["t_star"] == pytest.approx(want, abs=1e-12)
    assert art["split_seed"] == 20260610 and art["canonical_presentation"] == 0 and art["grid_size"] == 41
    assert art["split_rule"] and art["grid_span"] == "all_queries_canonical"
    # shuffle 1 is not the canonical presentation: changing it leaves t* alone
    changed = _scores({q: [v[0], [9.0] * 6, v[2]] for q, v in per_query.items()})
    assert tune_thresholds(changed, qrels)["t_star"] == art["t_star"]
    assert any("no relevant document" in w for w in art["warnings"])


def test_grid_spans_every_query_and_t_star_comes_from_the_development_half():
    qids = ["q0", "q1", "q2", "q3"]
    dev, test = _reference_split(qids)
    assert len(dev) == len(test) == 2
    # development queries: doc 0 (relevant) scores 1, doc 1 scores 0, so F1 = 1 for 0 < t <= 1
    per_query = {q: [[1.0, 0.0], [0.0, 1.0]] for q in dev}
    # test queries: one canonical score of 1.1, beyond the development range
    per_query.update({test[0]: [[1.1, 0.5], [0.5, 1.1]], test[1]: [[0.2, 0.3], [0.3, 0.2]]})
    qrels = pl.DataFrame([(q, f"{q}-d0", 1) for q in qids], schema=["query_id", "doc_id", "relevance"],
                         orient="row")
    art = tune_thresholds(_scores(per_query), qrels)
    assert art["dev_queries"] == dev
    # METHODS v3 item 4: the grid runs 0 .. 1.1 (the test query's score moves its end)
    assert art["grid_min"] == 0.0 and art["grid_max"] == 1.1 and art["grid"][-1] == 1.1
    np.testing.assert_allclose(art["grid"], [1.1 * i / 40 for i in range(41)], rtol=0, atol=1e-15)
    # highest grid value <= 1 is 36 * 0.0275 = 0.99 (a dev-only grid 0 .. 1 would give t* = 1.0)
    assert art["t_star"] == pytest.approx(0.99, abs=1e-12)
    assert art["t_star"] == _brute_t_star({q: v[0] for q, v in per_query.items()}, dev, {q: {0} for q in qids})
    # a test-half score below the development range moves the other end; t* still from dev only
    per_query[test[1]] = [[-1.0, 0.3], [0.3, -1.0]]
    art = tune_thresholds(_scores(per_query), qrels)
    assert art["grid_min"] == -1.0 and art["grid_max"] == 1.1
    assert art["t_star"] == _brute_t_star({q: v[0] for q, v in per_query.items()}, dev, {q: {0} for q in qids})
    assert 0 < art["t_star"] <= 1.0


def test_degenerate_threshold_is_flagged():
    # every canonical score equal: the grid is one value and t* keeps everything
    scores = _scores({f"q{i}": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]] for i in range(4)})
    qrels = pl.DataFrame({"query_id": ["q0"], "doc_id": ["q0-d0"], "relevance": [1]})
    art = tune_thresholds(scores, qrels)
    assert any("keeps every candidate" in w for w in art["warnings"])


def test_bsc_threshold_uses_bsc_scores(tmp_path):
    # K = 2, E = 2: ensemble 0 = mean of shuffles 0 and 1
    per_query = {f"q{i}": [[3.0, 0.0, 1.0], [1.0, 2.0, 1.0], [0.0, 0.0, 0.0], [5.0, 5.0, 5.0]] for i in range(4)}
    scores = _scores(per_query)
    qrels = pl.DataFrame({"query_id": [f"q{i}" for i in range(4)], "doc_id": [f"q{i}-d0" for i in range(4)],
                          "relevance": [1] * 4})
    art = tune_thresholds(scores, qrels, bsc_k=2, ensembles=2)
    # BSC canonical scores per query: [2, 1, 1]; grid over [1, 2]; only doc 0 kept for t in (1, 2]
    assert art["t_star"] == pytest.approx(2.0) and art["bsc_k"] == 2
    single = tune_thresholds(scores, qrels)  # single-pass shuffle 0: [3, 0, 1] -> grid [0, 3]
    assert single["t_star"] == pytest.approx(3.0)


def test_artifact_roundtrip_and_bad_files(tmp_path):
    per_query = {f"q{i}": [[1.0, 0.0], [0.0, 1.0]] for i in range(4)}
    s = _scores(per_query).with_columns(
        pl.col("presentation", "position").cast(pl.Int32), pl.lit(0, dtype=pl.Int32).alias("prompt"),
        pl.col("position").cast(pl.Int32).alias("slot"), *[pl.lit(None, dtype=pl.Float32).alias(f"p{i}") for i in range(4)])
    sp = write_table(s, tmp_path / "s.parquet", "scores")
    qp = write_table(pl.DataFrame({"query_id": ["q0"], "doc_id": ["q0-d0"], "relevance": [1]},
                                  schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}),
                     tmp_path / "q.parquet", "qrels")
    out = tmp_path / "t" / "x.json"
    art = thresholds_from_files(sp, qp, out, split_seed=7)
    back = read_thresholds(out)
    assert back["t_star"] == art["t_star"] and back["split_seed"] == 7 and back["params"]["split_seed"] == 7
    assert [p.name for p in out.parent.iterdir()] == ["x.json"]
    out.write_text(json.dumps({**back, "test_queries": back["dev_queries"]}))  # an older file: no digest
    with pytest.raises(ValueError, match="overlap"):
        read_thresholds(out)
    out.write_text("{")
    with pytest.raises(SchemaError, match="x.json.*not valid JSON"):
        read_thresholds(out)
    out.write_bytes(b'{"t_star": 0.5, "dev\xff": 1}')
    with pytest.raises(SchemaError, match="x.json.*not UTF-8"):
        read_thresholds(out)


def test_a_one_digit_edit_of_t_star_is_refused(tmp_path):
    """t* is the one number every Jaccard of the run hangs on: an edited one must not be read."""
    per_query = {f"q{i}": [[0.9, 0.1, 0.2 + 0.05 * i], [0.1, 0.9, 0.3]] for i in range(6)}
    art = tune_thresholds(_scores(per_query), pl.DataFrame({"query_id": ["q0", "q1"], "doc_id": ["q0-d0", "q1-d1"],
                                                             "relevance": [1, 1]}))
    out = write_thresholds(art, tmp_path / "thresholds" / "v" / "d.json", {"split_seed": 1})
    assert read_thresholds(out)["t_star"] == art["t_star"]
    text = out.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(' "t_star": '))
    value = line.split(": ")[1].rstrip(",")
    digit = next(i for i, ch in enumerate(value) if ch in "123456789")
    edited = value[:digit] + str((int(value[digit]) + 1) % 10) + value[digit + 1:]
    out.write_text(text.replace(line, line.replace(value, edited)))
    with pytest.raises(SchemaError) as err:
        read_thresholds(out)
    msg = str(err.value)
    assert str(out) in msg and "threshold file" in msg and "edited by hand" in msg and REBUILD_HINT in msg
