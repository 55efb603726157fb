"""compute_metrics: the long metrics table, checked against the metric functions one by one."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from presdep.metrics import compute as cm
from presdep.metrics import decisions as dec
from presdep.metrics import instability as ins
from presdep.metrics import qa
from presdep.metrics.quality import ndcg_runs, qrels_to_dict
from presdep.schemas import read_metadata, read_table

QRELS = pl.DataFrame(
    {
        "query_id": ["q1", "q1", "q1", "q2", "q2"],
        "doc_id": ["d1", "d2", "d3", "e1", "e2"],
        "relevance": [3, 1, 0, 2, 0],
    },
    schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
)
DOCS = {"q1": ["d1", "d2", "d3", "d4", "d5", "d6"], "q2": ["e1", "e2", "e3", "e4", "e5"], "q3": ["f1", "f2", "f3", "f4"]}


def _rows(qid, pert, pres, docs_in_order, scores):
    return [
        {"query_id": qid, "doc_id": d, "perturbation": pert, "presentation": pres, "position": p,
         "prompt": 0, "slot": p, "score": float(s)}
        for p, (d, s) in enumerate(zip(docs_in_order, scores))
    ]


def make_scores(seed=0, m_shuffle=4, ties=False) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for q, docs in DOCS.items():
        n = len(docs)
        draw = (lambda: rng.integers(0, 3, n).astype(float)) if ties else (lambda: rng.random(n))
        rows += _rows(q, "canonical", 0, docs, draw())
        for m in range(m_shuffle):
            rows += _rows(q, "random_shuffle", m, list(rng.permutation(docs)), draw())
        for m in range(3):
            rows += _rows(q, "within_chunk", m, list(rng.permutation(docs)), draw())
        # middle injection of the strongest relevant doc (q3 has no qrels: first doc)
        target = {"q1": "d1", "q2": "e1", "q3": "f1"}[q]
        rest = [d for d in docs if d != target]
        for m, idx in enumerate((0, n // 2, n - 1)):
            order = rest[:idx] + [target] + rest[idx:]
            rows += _rows(q, "middle_injection", m, order, draw())
    return pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))


def block_of(scores: pl.DataFrame, q: str, pert: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    sub = scores.filter((pl.col("query_id") == q) & (pl.col("perturbation") == pert)).sort("presentation", "doc_id")
    docs = sorted(set(sub["doc_id"].to_list()))
    m = sub["presentation"].n_unique()
    return docs, sub["score"].to_numpy().reshape(m, -1), sub["position"].to_numpy().reshape(m, -1)


def value(metrics, pert, metric, q=None):
    sel = metrics.filter((pl.col("perturbation") == pert) & (pl.col("metric") == metric))
    sel = sel.filter(pl.col("query_id").is_null() if q is None else pl.col("query_id") == q)
    assert sel.height == 1, (pert, metric, q, sel)
    return sel["value"][0]


@pytest.mark.parametrize("ties", [False, True])
def test_rerank_metrics_match_the_metric_functions(ties):
    scores = make_scores(seed=1, ties=ties)
    out = cm.compute_metrics(scores, QRELS, dataset="toy", task="rerank", variant="v", seed=3)
    qd = qrels_to_dict(QRELS)
    assert out.columns == ["dataset", "task", "variant", "seed", "perturbation", "query_id", "metric", "value"]
    assert set(out["dataset"]) == {"toy"} and set(out["seed"]) == {3} and set(out["task"]) == {"rerank"}

    # threshold tuned once on the canonical presentation of the judged queries
    canon = {q: block_of(scores, q, "canonical") for q in ("q1", "q2")}
    t_star = dec.tune_threshold([b[1][0] for b in canon.values()],
                                [np.array([qd[q].get(d, 0) >= 1 for d in b[0]]) for q, b in canon.items()])
    assert value(out, "canonical", "threshold") == t_star
    assert set(out.filter(pl.col("perturbation") == "canonical")["metric"]) == {"ndcg@10", "threshold"}

    expected_metrics = {
        "random_shuffle": {"ndcg@10", "tau_psi", "jaccard", "set_flip", "retained_size", "zeng_psi", "zeng_psi_corpus"},
        "within_chunk": {"ndcg@10", "tau_psi", "jaccard", "set_flip", "retained_size"},
        "middle_injection": {"ndcg@10", "tau_psi", "jaccard", "set_flip", "retained_size", "zeng_psi", "zeng_psi_corpus"},
    }
    for pert, names in expected_metrics.items():
        assert set(out.filter(pl.col("perturbation") == pert)["metric"]) == names
        for q in DOCS:
            docs, s, pos = block_of(scores, q, pert)
            tau = ins.tau_psi(s)
            got_tau = value(out, pert, "tau_psi", q)
            assert got_tau is None if math.isnan(tau) else got_tau == pytest.approx(tau)
            j, f, size = dec.set_stats(s, t_star)
            assert value(out, pert, "jaccard", q) == pytest.approx(j)
            assert value(out, pert, "set_flip", q) == pytest.approx(f)
            assert value(out, pert, "retained_size", q) == pytest.approx(size)
            if q not in qd:  # no qrels: no quality rows, instability still there
                assert out.filter((pl.col("query_id") == q) & pl.col("metric").is_in(["ndcg@10", "zeng_psi"])).height == 0
                continue
            per_pres = [ndcg_runs({q: dict(zip(docs, row))}, qd, 10)[q] for row in s]
            assert value(out, pert, "ndcg@10", q) == pytest.approx(np.mean(per_pres))
            if "zeng_psi" in names:
                i = docs.index({"q1": "d1", "q2": "e1"}[q])
                buckets = ins.position_bucket(pos[:, i], len(docs))
                z = ins.zeng_psi(np.array(per_pres), buckets)
                got = value(out, pert, "zeng_psi", q)
                assert (got is None and math.isnan(z)) or got == pytest.approx(z)
        # aggregate rows: mean over the queries where the metric is defined
        for metric in names - {"zeng_psi_corpus"}:
            per_q = out.filter((pl.col("perturbation") == pert) & (pl.col("metric") == metric) & pl.col("query_id").is_not_null())
            vals = per_q["value"].drop_nulls()
            agg = value(out, pert, metric)
            assert (agg is None and vals.len() == 0) or agg == pytest.approx(vals.mean())
    # middle injection: one presentation per bucket by construction
    for q in ("q1", "q2"):
        docs, s, pos = block_of(scores, q, "middle_injection")
        i = docs.index({"q1": "d1", "q2": "e1"}[q])
        assert sorted(ins.position_bucket(pos[:, i], len(docs)).tolist()) == [0, 1, 2]


def test_identity_presentations_on_dl19(shared_data):
    from presdep.data.trec import read_qrels, read_run

    base = shared_data / "trec-dl19"
    run = read_run(base / "bm25_trec_run_dl19_top100.txt")
    qrels = read_qrels(base / "qrels.dl19-passage.txt")
    rng = np.random.default_rng(0)
    parts = [run.select("query_id", "doc_id", "score", pl.lit("canonical").alias("perturbation"),
                        pl.lit(0).alias("presentation"), (pl.col("rank") - 1).cast(pl.Int64).alias("position"))]
    for m in range(3):  # shuffled presentations, same scores: a presentation-independent scorer
        parts.append(
            run.with_columns(pl.Series("position", rng.permutation(run.height)))
            .with_columns(pl.col("position").rank("ordinal").over("query_id").cast(pl.Int64) - 1)
            .select("query_id", "doc_id", "score", pl.lit("random_shuffle").alias("perturbation"),
                    pl.lit(m).alias("presentation"), "position")
        )
    scores = pl.concat(parts)
    out = cm.compute_metrics(scores, qrels, dataset="dl19", task="rerank", variant="bm25", seed=None)
    assert round(value(out, "canonical", "ndcg@10"), 4) == 0.5058
    assert round(value(out, "random_shuffle", "ndcg@10"), 4) == 0.5058
    assert value(out, "random_shuffle", "tau_psi") == 0.0
    assert value(out, "random_shuffle", "jaccard") == 1.0
    assert value(out, "random_shuffle", "set_flip") == 0.0
    zeng = out.filter((pl.col("metric") == "zeng_psi") & pl.col("query_id").is_not_null())["value"].drop_nulls()
    assert zeng.len() > 0 and (zeng == 0).all()


def test_random_scores_give_half_tau_psi():
    rng = np.random.default_rng(5)
    q, n, m = 30, 40, 6
    rows = {"query_id": [], "doc_id": [], "perturbation": [], "presentation": [], "score": []}
    for qi in range(q):
        for pert, mm in (("canonical", 1), ("random_shuffle", m)):
            for p in range(mm):
                rows["query_id"] += [f"q{qi}"] * n
                rows["doc_id"] += [f"d{i}" for i in range(n)]
                rows["perturbation"] += [pert] * n
                rows["presentation"] += [p] * n
                rows["score"] += rng.random(n).tolist()
    qrels = pl.DataFrame({"query_id": [f"q{i}" for i in range(q)], "doc_id": ["d0"] * q, "relevance": [1] * q})
    out = cm.compute_metrics(pl.DataFrame(rows), qrels, dataset="r", task="rerank", variant="rand", seed=None)
    assert abs(value(out, "random_shuffle", "tau_psi") - 0.5) < 0.02
    # no position column: Zeng PSI is not computed (and says so in the log)
    assert out.filter(pl.col("metric").str.starts_with("zeng")).height == 0


def test_errors_name_the_query():
    scores = make_scores()
    missing = scores.filter(~((pl.col("query_id") == "q2") & (pl.col("perturbation") == "random_shuffle")
                              & (pl.col("presentation") == 2) & (pl.col("doc_id") == "e4")))
    with pytest.raises(ValueError, match=r"'q2'.*random_shuffle.*presentation 2 lacks doc.*e4"):
        cm.compute_metrics(missing, QRELS, dataset="t", task="rerank", variant="v", seed=None)
    swapped = scores.with_columns(
        pl.when((pl.col("query_id") == "q2") & (pl.col("perturbation") == "within_chunk")
                & (pl.col("presentation") == 1) & (pl.col("doc_id") == "e3"))
        .then(pl.lit("zz")).otherwise(pl.col("doc_id")).alias("doc_id"))
    with pytest.raises(ValueError, match=r"'q2'.*within_chunk.*presentation 0 lacks doc.*zz"):
        cm.compute_metrics(swapped, QRELS, dataset="t", task="rerank", variant="v", seed=None)
    dup = pl.concat([scores, scores.filter((pl.col("query_id") == "q1") & (pl.col("perturbation") == "within_chunk")
                                            & (pl.col("presentation") == 1) & (pl.col("doc_id") == "d2"))])
    with pytest.raises(ValueError, match=r"'q1'.*within_chunk.*presentation 1 has doc 'd2' twice"):
        cm.compute_metrics(dup, QRELS, dataset="t", task="rerank", variant="v", seed=None)
    nan = scores.with_columns(pl.when((pl.col("query_id") == "q3") & (pl.col("doc_id") == "f2"))
                              .then(float("nan")).otherwise(pl.col("score")).alias("score"))
    with pytest.raises(ValueError, match=r"'q3'.*NaN"):
        cm.compute_metrics(nan, QRELS, dataset="t", task="rerank", variant="v", seed=None)
    with pytest.raises(ValueError, match="canonical"):
        cm.compute_metrics(scores.filter(pl.col("perturbation") != "canonical"), QRELS,
                           dataset="t", task="rerank", variant="v", seed=None)
    with pytest.raises(ValueError, match="task"):
        cm.compute_metrics(scores, QRELS, dataset="t", task="bogus", variant="v", seed=None)


def test_middle_injection_of_another_doc_is_refused():
    scores = make_scores()
    # swap the roles of d1 and d2 in q1's middle injection: d2 moves, d1 stays put
    swapped = scores.with_columns(
        pl.when((pl.col("query_id") == "q1") & (pl.col("perturbation") == "middle_injection") & (pl.col("doc_id") == "d1"))
        .then(pl.lit("d2"))
        .when((pl.col("query_id") == "q1") & (pl.col("perturbation") == "middle_injection") & (pl.col("doc_id") == "d2"))
        .then(pl.lit("d1"))
        .otherwise(pl.col("doc_id"))
        .alias("doc_id")
    )
    with pytest.raises(ValueError, match=r"middle_injection.*'q1'.*'d1'"):
        cm.compute_metrics(swapped, QRELS, dataset="t", task="rerank", variant="v", seed=None)


def test_given_threshold_is_used_and_recorded():
    scores = make_scores().filter(pl.col("perturbation") != "canonical")
    out = cm.compute_metrics(scores, QRELS, dataset="t", task="rerank", variant="v", seed=None, threshold=0.5)
    assert value(out, "canonical", "threshold") == 0.5
    docs, s, _ = block_of(scores, "q1", "random_shuffle")
    assert value(out, "random_shuffle", "jaccard", "q1") == pytest.approx(dec.set_stats(s, 0.5)[0])


def test_strongest_relevant_agrees_with_presentations():
    from presdep.presentations import strongest_relevant as pres_strongest

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 8))
        docs = [f"d{int(i)}" for i in rng.choice(20, n, replace=False)]
        grades = {d: int(rng.integers(0, 3)) for d in docs if rng.random() < 0.7}
        i = cm.strongest_relevant(docs, grades)
        if i is None:
            assert all(g < 1 for g in grades.values())
        else:
            assert docs[i] == pres_strongest(docs, grades)


def test_single_shuffle_gives_null_instability():
    scores = make_scores(m_shuffle=1)
    out = cm.compute_metrics(scores, QRELS, dataset="t", task="rerank", variant="v", seed=None)
    for metric in ("tau_psi", "jaccard", "set_flip"):
        sel = out.filter((pl.col("perturbation") == "random_shuffle") & (pl.col("metric") == metric))
        assert sel["value"].null_count() == sel.height  # per query and aggregate
    assert value(out, "random_shuffle", "retained_size") is not None


def test_response_task():
    scores = make_scores(seed=2)
    out = cm.compute_metrics(scores, QRELS, dataset="rm", task="response", variant="v", seed=None)
    assert set(out.filter(pl.col("perturbation") == "random_shuffle")["metric"]) == {
        "ndcg@1", "tau_psi", "pair_flip", "selection_flip"}
    assert set(out.filter(pl.col("perturbation") == "canonical")["metric"]) == {"ndcg@1"}
    docs, s, _ = block_of(scores, "q2", "random_shuffle")
    assert value(out, "random_shuffle", "pair_flip", "q2") == pytest.approx(dec.pair_flip(s, docs))
    assert value(out, "random_shuffle", "selection_flip", "q2") == pytest.approx(dec.selection_flip(s, docs))
    qd = qrels_to_dict(QRELS)
    exp = np.mean([ndcg_runs({"q2": dict(zip(docs, r))}, qd, 1)["q2"] for r in s])
    assert value(out, "random_shuffle", "ndcg@1", "q2") == pytest.approx(exp)


def test_qa_answers():
    scores = make_scores()
    answers = pl.DataFrame(
        {
            "query_id": ["q1"] * 5 + ["q2"] * 4,
            "perturbation": ["canonical"] + ["random_shuffle"] * 4 + ["canonical"] + ["random_shuffle"] * 3,
            "presentation": [0, 0, 1, 2, 3, 0, 0, 1, 2],
            "answer": ["Paris", "Paris", "the paris", "Lyon", "Paris, France", "x", "y", "y", "z"],
        }
    )
    gold = pl.DataFrame({"query_id": ["q1", "q1"], "answer": ["Paris", "Paris France"]})
    out = cm.compute_metrics(scores, QRELS, dataset="h", task="qa", variant="v", seed=None, answers=answers, gold=gold)
    assert value(out, "random_shuffle", "answer_flip", "q1") == pytest.approx(qa.answer_flip(["Paris", "the paris", "Lyon", "Paris, France"]))
    assert value(out, "random_shuffle", "answer_flip", "q1") == pytest.approx(0.5)
    assert value(out, "random_shuffle", "answer_flip", "q2") == pytest.approx(1 / 3)
    assert value(out, "random_shuffle", "em", "q1") == pytest.approx(3 / 4)
    assert value(out, "random_shuffle", "f1", "q1") == pytest.approx(3 / 4)
    assert value(out, "canonical", "em", "q1") == 1.0
    # q2 has no gold answer: no EM/F1 rows, but its flip is there
    assert out.filter((pl.col("query_id") == "q2") & pl.col("metric").is_in(["em", "f1"])).height == 0
    assert out.filter((pl.col("perturbation") == "canonical") & (pl.col("metric") == "answer_flip")).height == 0
    assert value(out, "random_shuffle", "jaccard") is not None


def test_write_metrics_roundtrip_and_files(tmp_path):
    from presdep.schemas import write_table

    scores = make_scores()
    out = cm.compute_metrics(scores, QRELS, dataset="t", task="rerank", variant="v", seed=1)
    path = cm.write_metrics(out, tmp_path / "m.parquet", {"variant": "v"})
    back = read_table(path, "metrics")
    assert back.height == out.height
    assert read_metadata(path)["params"] == {"variant": "v"}
    probs = [pl.lit(None, dtype=pl.Float32).alias(f"p{g}") for g in range(4)]
    write_table(scores.with_columns(probs), tmp_path / "scores.parquet", "scores")
    write_table(QRELS, tmp_path / "qrels.parquet", "qrels")
    got = cm.metrics_from_files(tmp_path / "scores.parquet", tmp_path / "qrels.parquet", tmp_path / "m2.parquet",
                                dataset="t", task="rerank", variant="v", seed=1)
    assert got.sort("perturbation", "metric", "query_id").equals(out.sort("perturbation", "metric", "query_id"))


def test_cli_with_runs_and_scores(tmp_path, shared_data, capsys):
    from presdep.cli import main

    base = shared_data / "trec-dl19"
    lines = open(base / "bm25_trec_run_dl19_top100.txt").read().splitlines()
    keep = [ln for ln in lines if ln.split()[0] in {"1037798", "104861", "1063750"}]
    rng = np.random.default_rng(1)
    runs = []
    for m in range(3):
        path = tmp_path / f"run{m}.trec"
        path.write_text("\n".join(f"{q} Q0 {d} 1 {rng.random():.6f} x" for q, _, d, *_ in map(str.split, keep)) + "\n")
        runs.append(str(path))
    canonical = tmp_path / "canon.trec"
    canonical.write_text("\n".join(keep) + "\n")
    qrels = str(base / "qrels.dl19-passage.txt")
    out = tmp_path / "m.parquet"
    rc = main(["metrics", "--runs", *runs, "--canonical-run", str(canonical), "--qrels", qrels,
               "--dataset", "dl19", "--variant", "random", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "tau_psi" in printed and "random_shuffle" in printed
    m = read_table(out, "metrics")
    assert abs(value(m, "random_shuffle", "tau_psi") - 0.5) < 0.05
    # missing canonical run and threshold: a clear error, exit code 2
    rc = main(["metrics", "--runs", *runs, "--qrels", qrels, "--dataset", "dl19", "--variant", "random"])
    assert rc == 2
    assert "--canonical-run" in capsys.readouterr().err


def test_middle_injection_from_the_presentations_module_on_dl19(shared_data):
    """The presentations' middle injection and the metrics agree on the injected doc."""
    from presdep.data.trec import read_qrels, read_run
    from presdep.presentations import middle_injection

    base = shared_data / "trec-dl19"
    run = read_run(base / "bm25_trec_run_dl19_top100.txt").sort("query_id", "rank")
    qrels = read_qrels(base / "qrels.dl19-passage.txt")
    qd = qrels_to_dict(qrels)
    rows = []
    for (qid,), g in list(run.group_by("query_id", maintain_order=True))[:8]:
        ids, sc = g["doc_id"].to_list(), dict(zip(g["doc_id"], g["score"]))
        rows += _rows(qid, "canonical", 0, ids, [sc[d] for d in ids])
        for m, order in enumerate(middle_injection(ids, qd[qid])):
            # a presentation-sensitive toy scorer: the score decays with the presented position
            rows += _rows(qid, "middle_injection", m, order, [sc[d] - 0.05 * p for p, d in enumerate(order)])
    scores = pl.DataFrame(rows)
    out = cm.compute_metrics(scores, qrels, dataset="dl19", task="rerank", variant="toy", seed=None)
    zeng = out.filter((pl.col("metric") == "zeng_psi") & pl.col("query_id").is_not_null())
    assert zeng.height == 8 and zeng["value"].null_count() == 0
    assert ((zeng["value"] >= 0) & (zeng["value"] <= 1)).all()
