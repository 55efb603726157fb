"""compute_metrics (METHODS v3) against brute-force oracles written here from the METHODS text:
pytrec_eval on explicitly de-tied runs, scipy's Kendall tau, Python sets, hand-worked cases."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import polars as pl
import pytest
import pytrec_eval
from scipy.stats import kendalltau

from presdep.contracts.schemas import read_metadata, read_table
from presdep.metrics import compute as cm
from presdep.metrics import instability as ins
from presdep.metrics.quality import qrels_to_dict

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
        rows += _rows(q, "first_stage", 0, docs, draw())
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


THR = {"t_star": 0.5, "split_seed": 1, "canonical_presentation": 0, "dev_queries": ["q2"],
       "test_queries": ["q1", "q3"], "grid_size": 41}
PYTREC = {"ndcg@10": ("ndcg_cut.10", "ndcg_cut_10"), "ndcg@5": ("ndcg_cut.5", "ndcg_cut_5"),
          "ndcg@1": ("ndcg_cut.1", "ndcg_cut_1"), "map": ("map", "map"), "mrr": ("recip_rank", "recip_rank"),
          "recall@2": ("recall.2", "recall_2"), "recall@5": ("recall.5", "recall_5")}


def detied(docs, scores, positions):
    """METHODS: strict ranking, ties broken by presented position (first shown wins)."""
    order = sorted(range(len(docs)), key=lambda i: (-scores[i], positions[i]))
    return {docs[i]: float(len(docs) - r) for r, i in enumerate(order)}


def trec(measure, q, run, qrels=QRELS):
    req, key = PYTREC[measure]
    ev = pytrec_eval.RelevanceEvaluator({q: qrels_to_dict(qrels)[q]}, {req})
    return ev.evaluate({q: run})[q][key]


def brute_tau_psi(s, pos, strict):
    taus = []
    for a, b in itertools.combinations(range(len(s)), 2):
        if strict:
            # strict rankings have no ties, so scipy's tau-b is tau-a
            taus.append(kendalltau(_ranks(s[a], pos[a]), _ranks(s[b], pos[b])).statistic)
        else:
            taus.append(kendalltau(s[a], s[b]).statistic)  # tau-b on raw scores
    if not taus or any(math.isnan(t) for t in taus):  # scipy: NaN when a ranking is constant
        return math.nan
    return min(1.0, max(0.0, (1 - np.mean(taus)) / 2))


def _ranks(scores, positions):
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], positions[i]))
    r = [0] * len(scores)
    for k, i in enumerate(order):
        r[i] = k
    return r


@pytest.mark.parametrize("ties", [False, True])
def test_rerank_metrics_match_brute_force(ties):
    scores = make_scores(seed=1, ties=ties)
    out = cm.compute_metrics(scores, QRELS, dataset="toy", task="rerank", variant="v", seed=3, thresholds=THR)
    qd = qrels_to_dict(QRELS)
    assert out.columns == ["dataset", "task", "variant", "seed", "perturbation", "query_id", "metric", "value"]
    assert set(out["dataset"]) == {"toy"} and set(out["seed"]) == {3} and set(out["task"]) == {"rerank"}
    assert value(out, "random_shuffle", "t_star") == 0.5

    # quality cells: the first-stage pass, pytrec_eval on the de-tied run
    assert set(out.filter(pl.col("perturbation") == "first_stage")["metric"]) == {"ndcg@10", "ndcg@5", "map", "mrr"}
    for q in ("q1", "q2"):
        docs, s, pos = block_of(scores, q, "first_stage")
        run = detied(docs, s[0].tolist(), pos[0].tolist())
        for measure in ("ndcg@10", "ndcg@5", "map", "mrr"):
            assert value(out, "first_stage", measure, q) == pytest.approx(trec(measure, q, run), abs=1e-12)

    sets = {"jaccard", "set_flip", "retained_size", "precision", "recall", "f1", "retention",
            "canonical_precision", "canonical_recall", "canonical_f1", "canonical_retention",
            "score_variance", "matched_jaccard", "matched_set_flip"}
    shuffle = {"ndcg10_shuffle_mean", "ndcg10_shuffle_worst", "ndcg10_shuffle_best", "tau_psi", "tau_psi_b",
               "tie_rate"}
    zeng = {"zeng_psi", "zeng_psi_corpus"}
    flags = {"t_star", "warn_threshold_keeps_all", "warn_threshold_keeps_none", "warn_single_presentation",
             "warn_queries_without_relevant", "passes_per_query", "warn_threshold_grid_edge",
             "warn_retention_high", "warn_retention_low", "warn_few_test_queries",
             "shuffles_per_query", "prompt_width", "candidates_per_query", "order_averaged_k"}
    expected = {"random_shuffle": shuffle | sets | zeng | flags | POSITION | {"ndcg10_order_averaged"}, "within_chunk": shuffle | sets,
                "middle_injection": shuffle | sets | zeng}
    for pert, names in expected.items():
        assert _names(out, pert) == names
        for q in DOCS:
            docs, s, pos = block_of(scores, q, pert)
            for name, strict in (("tau_psi", True), ("tau_psi_b", False)):
                want = brute_tau_psi(s.tolist(), pos.tolist(), strict)
                got = value(out, pert, name, q)
                assert got is None if math.isnan(want) else got == pytest.approx(want, abs=1e-12), (pert, q, name, got, want)
            if q in THR["test_queries"]:
                _check_sets(out, pert, q, docs, s, pos, qd.get(q, {}))
            else:  # development half: no retained-set rows
                assert out.filter((pl.col("query_id") == q) & (pl.col("metric") == "jaccard")).height == 0
            if q not in qd:  # no qrels: no quality rows, instability still there
                assert out.filter((pl.col("query_id") == q) & pl.col("metric").str.starts_with("ndcg")).height == 0
                continue
            per_pres = [trec("ndcg@10", q, detied(docs, row, p)) for row, p in zip(s.tolist(), pos.tolist())]
            assert value(out, pert, "ndcg10_shuffle_mean", q) == pytest.approx(np.mean(per_pres), abs=1e-12)
            assert value(out, pert, "ndcg10_shuffle_worst", q) == pytest.approx(min(per_pres), abs=1e-12)
            assert value(out, pert, "ndcg10_shuffle_best", q) == pytest.approx(max(per_pres), abs=1e-12)
            if "zeng_psi" in names:
                i = docs.index({"q1": "d1", "q2": "e1"}[q])
                buckets = ins.position_bucket(pos[:, i], len(docs))
                z = ins.zeng_psi(np.array(per_pres), buckets)
                got = value(out, pert, "zeng_psi", q)
                assert (got is None and math.isnan(z)) or got == pytest.approx(z)
        # aggregate rows: mean over the queries where the metric is defined
        for metric in names - zeng - flags:
            per_q = out.filter((pl.col("perturbation") == pert) & (pl.col("metric") == metric) & pl.col("query_id").is_not_null())
            vals = per_q["value"].drop_nulls()
            agg = value(out, pert, metric)
            assert (agg is None and vals.len() == 0) or agg == pytest.approx(vals.mean())
    assert value(out, "random_shuffle", "passes_per_query") == 1 + 4 + 3 + 3
    assert value(out, "random_shuffle", "shuffles_per_query") == 4  # M, as run (the footnote's)
    assert value(out, "random_shuffle", "warn_queries_without_relevant") == 1  # q3


def _check_sets(out, pert, q, docs, s, pos, judged):
    """The retained-set family by Python sets, straight from the METHODS text."""
    t = THR["t_star"]
    rel = {d for d in docs if judged.get(d, 0) >= 1}
    kept = [{d for d, v in zip(docs, row) if v >= t} for row in s.tolist()]
    pairs = list(itertools.combinations(kept, 2))
    jac = np.mean([1.0 if not (a | b) else len(a & b) / len(a | b) for a, b in pairs])
    assert value(out, pert, "jaccard", q) == pytest.approx(jac)
    assert value(out, pert, "set_flip", q) == pytest.approx(_set_flip(kept))

    def prf(k):
        p = len(k & rel) / len(k) if k else 0.0
        r = len(k & rel) / len(rel) if rel else 0.0
        f = 2 * len(k & rel) / (len(k) + len(rel)) if rel else 0.0
        return p, r, f, len(k) / len(docs)

    stats = np.array([prf(k) for k in kept])
    for i, name in enumerate(("precision", "recall", "f1", "retention")):
        assert value(out, pert, name, q) == pytest.approx(stats[:, i].mean())
        assert value(out, pert, f"canonical_{name}", q) == pytest.approx(stats[0, i])
    assert value(out, pert, "score_variance", q) == pytest.approx(np.mean(np.var(s, axis=0)))
    n = len(kept[0])
    matched = [set(sorted(docs, key=lambda d: (-row[docs.index(d)], p[docs.index(d)]))[:n])
               for row, p in zip(s.tolist(), pos.tolist())]
    mpairs = list(itertools.combinations(matched, 2))
    mj = np.mean([1.0 if not (a | b) else len(a & b) / len(a | b) for a, b in mpairs])
    assert value(out, pert, "matched_jaccard", q) == pytest.approx(mj)
    assert value(out, pert, "matched_set_flip", q) == pytest.approx(_set_flip(matched))


def _set_flip(sets):
    """METHODS v3 item 9: share of the ever-retained docs whose membership is not the same in
    every presentation; nothing ever retained -> 0."""
    ever = set().union(*sets)
    return sum(1 for d in ever if not all(d in x for x in sets)) / len(ever) if ever else 0.0


def test_ties_in_ndcg_are_broken_by_presented_position():
    # d2 (grade 1) and d3 (grade 0) tie; presented d3 first, so d3 ranks above d2.
    rows = _rows("q1", "first_stage", 0, ["d1", "d3", "d2", "d4"], [2.0, 1.0, 1.0, 0.0])
    for m, order in enumerate((["d2", "d3", "d1", "d4"], ["d3", "d2", "d4", "d1"])):
        rows += _rows("q1", "random_shuffle", m, order, [1.0 if d in ("d2", "d3") else 0.5 for d in order])
    s = pl.DataFrame(rows)
    out = cm.compute_metrics(s, QRELS, dataset="t", task="rerank", variant="v", seed=None,
                             thresholds={**THR, "test_queries": ["q1"]})
    dcg = lambda gains: sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = dcg([3, 1, 0])
    assert value(out, "first_stage", "ndcg@10", "q1") == pytest.approx(dcg([3, 0, 1, 0]) / ideal)
    # shuffle 0: d2 shown first -> d2 d3 d1 d4; shuffle 1: d3 d2 d4 d1 (d1 = 0.5 ties d4)
    per = [dcg([1, 0, 3, 0]) / ideal, dcg([0, 1, 0, 3]) / ideal]
    assert value(out, "random_shuffle", "ndcg10_shuffle_mean", "q1") == pytest.approx(np.mean(per))
    # strict rankings differ (d2/d3 and d1/d4 swap): tau-a = (6 - 2*2)/6 = 1/3 -> psi 1/3;
    # tau-b on raw scores: identical scores -> tau 1 -> psi 0
    assert value(out, "random_shuffle", "tau_psi", "q1") == pytest.approx((1 - 1 / 3) / 2)
    assert value(out, "random_shuffle", "tau_psi_b", "q1") == 0.0


def test_round_robin_and_contiguous_same_shuffles_different_first_stage_quality():
    """A listwise scorer whose score of a doc drops with the relevance of its prompt-mates:
    contiguous chunks of the first-stage order crowd the relevant docs into one prompt,
    round-robin chunks spread them. Under random shuffles both rows are the same process."""
    B, n = 3, 9
    docs = [f"d{i}" for i in range(n)]
    grade = {"d0": 3, "d1": 2, "d2": 1, "d4": 1}
    qrels = pl.DataFrame({"query_id": ["q"] * 4, "doc_id": list(grade), "relevance": list(grade.values())})

    def score_prompt(prompt):  # deterministic in the prompt's content
        mates = sum(grade.get(d, 0) for d in prompt)
        return {d: grade.get(d, 0) + 0.1 * (i == 0) - 0.6 * (mates - grade.get(d, 0)) for i, d in enumerate(prompt)}

    def rows_for(order, chunks, pert, m):
        out = []
        for prompt in chunks:
            sc = score_prompt(prompt)
            out += [{"query_id": "q", "doc_id": d, "perturbation": pert, "presentation": m,
                     "position": order.index(d), "score": sc[d]} for d in prompt]
        return out

    rng = np.random.default_rng(0)
    shuffles = [list(rng.permutation(docs)) for _ in range(6)]
    shuffle_rows = [r for m, o in enumerate(shuffles) for r in rows_for(o, [o[i:i + B] for i in range(0, n, B)], "random_shuffle", m)]
    P = n // B
    contiguous = rows_for(docs, [docs[i:i + B] for i in range(0, n, B)], "first_stage", 0)
    round_robin = rows_for(docs, [docs[j::P] for j in range(P)], "first_stage", 0)
    thr = {**THR, "dev_queries": [], "test_queries": ["q"]}
    res = {}
    for name, fs in (("contiguous", contiguous), ("round_robin", round_robin)):
        res[name] = cm.compute_metrics(pl.DataFrame(fs + shuffle_rows), qrels, dataset="t", task="rerank",
                                       variant=name, seed=None, thresholds=thr)
    assert value(res["contiguous"], "random_shuffle", "tau_psi") == value(res["round_robin"], "random_shuffle", "tau_psi")
    # hand oracle: contiguous prompts (d0 d1 d2) share 6 grade points -> d0 3-0.6*3+0.1 = 1.3,
    # d1 2-0.6*4 = -0.4, d2 1-0.6*5 = -2.0; (d3 d4 d5): d3 0.1-0.6 = -0.5, d4 1; (d6..d8) 0.1, 0, 0
    # ranking d0 d4 d6 d7 d8 (d7, d8 tie: d7 shown first) d1 d3 d5 d2; round-robin (d0 d3 d6), (d1 d4 d7), (d2 d5 d8):
    # d0 3.1, d3 -1.8, d6 -1.8; d1 1.5, d4 -0.2, d7 -1.8; d2 1.1, d5 -0.6, d8 -0.6 -> d0 d1 d2 d4 ...
    dcg = lambda gains: sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = dcg([3, 2, 1, 1])
    assert value(res["contiguous"], "first_stage", "ndcg@10") == pytest.approx(dcg([3, 1, 0, 0, 0, 2, 0, 0, 1]) / ideal)
    assert value(res["round_robin"], "first_stage", "ndcg@10") == pytest.approx(1.0)


def test_bsc_ensembles_against_brute_force_means():
    K, E = 2, 3
    scores = make_scores(seed=4, m_shuffle=K * E).filter(pl.col("perturbation").is_in(["first_stage", "random_shuffle"]))
    out = cm.compute_metrics(scores, QRELS, dataset="t", task="rerank", variant="bsc", seed=None,
                             thresholds=THR, bsc_k=K, ensembles=E)
    for q in DOCS:
        docs, s, _ = block_of(scores, q, "random_shuffle")
        _, _, fpos = block_of(scores, q, "first_stage")
        bsc = np.stack([s[e * K:(e + 1) * K].mean(axis=0) for e in range(E)])
        pos = np.tile(fpos[0], (E, 1))  # ties by first-stage rank
        assert value(out, "random_shuffle", "tau_psi", q) == pytest.approx(brute_tau_psi(bsc.tolist(), pos.tolist(), True))
        if q in THR["test_queries"]:
            kept = [{d for d, v in zip(docs, row) if v >= 0.5} for row in bsc]
            jac = np.mean([1.0 if not (a | b) else len(a & b) / len(a | b) for a, b in itertools.combinations(kept, 2)])
            assert value(out, "random_shuffle", "jaccard", q) == pytest.approx(jac)
        if q in ("q1", "q2"):  # quality cell: nDCG of ensemble 0's BSC scores, ties by doc id descending
            id_desc = sorted(docs, reverse=True)  # trec_eval: doc id descending (byte order)
            order = sorted(range(len(docs)), key=lambda i: (-bsc[0][i], id_desc.index(docs[i])))
            want = trec("ndcg@10", q, {docs[i]: float(len(docs) - r) for r, i in enumerate(order)})
            assert value(out, "first_stage", "ndcg@10", q) == pytest.approx(want)
    curve = out.filter(pl.col("perturbation").str.starts_with("bsc_curve_k"))
    assert set(curve["perturbation"]) == {"bsc_curve_k1", "bsc_curve_k2"}
    # K = K_max reproduces the main rows; K = 1 compares shuffles 0, 2, 4 (first of each ensemble)
    assert value(out, "bsc_curve_k2", "tau_psi") == pytest.approx(value(out, "random_shuffle", "tau_psi"))
    k1 = []
    for q in DOCS:
        _, s, p = block_of(scores, q, "random_shuffle")
        k1.append(brute_tau_psi(s[::K].tolist(), p[::K].tolist(), True))
    assert value(out, "bsc_curve_k1", "tau_psi") == pytest.approx(np.mean(k1))
    assert value(out, "bsc_curve_k2", "passes_per_query") == E * K + 1
    with pytest.raises(ValueError, match="presentations 0..7"):
        cm.compute_metrics(scores, QRELS, dataset="t", task="rerank", variant="bsc", seed=None,
                           thresholds=THR, bsc_k=K, ensembles=4)


def test_bsc_quality_cell_breaks_ties_by_doc_id_descending():
    """METHODS v3 item 6: the BSC quality cell ranks the mean scores as trec_eval does, score
    descending then doc id DESCENDING (byte order: "d9" > "d10"), not by first-stage rank."""
    qrels = pl.DataFrame({"query_id": ["q"] * 3, "doc_id": ["d10", "d9", "d2"], "relevance": [1, 3, 0]},
                         schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    first = ["d10", "d2", "d9"]  # first-stage order: d10 would win a tie by first-stage rank
    rows = _rows("q", "first_stage", 0, first, [0.5, 0.4, 0.3])
    # K = 2, E = 2; ensemble 0 means: d10 (0 + 2) / 2 = 1, d9 (1.5 + 0.5) / 2 = 1, d2 0
    per_shuffle = [{"d10": 0.0, "d9": 1.5, "d2": 0.0}, {"d10": 2.0, "d9": 0.5, "d2": 0.0},
                   {"d10": 0.3, "d9": 0.1, "d2": 0.2}, {"d10": 0.3, "d9": 0.1, "d2": 0.2}]
    for m, sc in enumerate(per_shuffle):
        order = [first[(i + m) % 3] for i in range(3)]
        rows += _rows("q", "random_shuffle", m, order, [sc[d] for d in order])
    out = cm.compute_metrics(pl.DataFrame(rows), qrels, dataset="t", task="rerank", variant="bsc", seed=None,
                             thresholds={**THR, "dev_queries": [], "test_queries": ["q"]}, bsc_k=2, ensembles=2,
                             bsc_curve=())
    # trec_eval order d9 (3), d10 (1), d2 (0) is the ideal one: nDCG = 1. First-stage rank would
    # give d10, d9, d2: (1 + 3 / log2 3) / (3 + 1 / log2 3).
    assert value(out, "first_stage", "ndcg@10", "q") == pytest.approx(1.0)
    run = {"d9": 3.0, "d10": 2.0, "d2": 1.0}  # explicitly de-tied in that order, through pytrec_eval
    assert value(out, "first_stage", "ndcg@10", "q") == pytest.approx(trec("ndcg@10", "q", run, qrels))
    wrong = (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))
    assert value(out, "first_stage", "ndcg@10", "q") != pytest.approx(wrong)


def test_identity_presentations_on_dl19(shared_data):
    from presdep.data.trec import read_qrels, read_run

    base = shared_data / "trec-dl19"
    run = read_run(base / "bm25_trec_run_dl19_top100.txt")
    qrels = read_qrels(base / "qrels.dl19-passage.txt")
    rng = np.random.default_rng(0)
    parts = [run.select("query_id", "doc_id", "score", pl.lit("first_stage").alias("perturbation"),
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
    assert round(value(out, "first_stage", "ndcg@10"), 4) == 0.5058
    assert round(value(out, "random_shuffle", "ndcg10_shuffle_mean"), 4) == 0.5058
    assert value(out, "random_shuffle", "tau_psi") == 0.0
    assert value(out, "random_shuffle", "jaccard") == 1.0
    assert value(out, "random_shuffle", "set_flip") == 0.0
    assert value(out, "random_shuffle", "matched_jaccard") == 1.0
    zeng = out.filter((pl.col("metric") == "zeng_psi") & pl.col("query_id").is_not_null())["value"].drop_nulls()
    assert zeng.len() > 0 and (zeng == 0).all()


def test_errors_name_the_query():
    scores = make_scores()
    missing = scores.filter(~((pl.col("query_id") == "q2") & (pl.col("perturbation") == "random_shuffle")
                              & (pl.col("presentation") == 2) & (pl.col("doc_id") == "e4")))
    with pytest.raises(ValueError, match=r"'q2'.*random_shuffle.*presentation 2 lacks doc.*e4"):
        cm.compute_metrics(missing, QRELS, dataset="t", task="rerank", variant="v", seed=None, thresholds=THR)
    dup = pl.concat([scores, scores.filter((pl.col("query_id") == "q1") & (pl.col("perturbation") == "within_chunk")
                                            & (pl.col("presentation") == 1) & (pl.col("doc_id") == "d2"))])
    with pytest.raises(ValueError, match=r"'q1'.*within_chunk.*presentation 1 has doc 'd2' twice"):
        cm.compute_metrics(dup, QRELS, dataset="t", task="rerank", variant="v", seed=None, thresholds=THR)
    nan = scores.with_columns(pl.when((pl.col("query_id") == "q3") & (pl.col("doc_id") == "f2"))
                              .then(float("nan")).otherwise(pl.col("score")).alias("score"))
    with pytest.raises(ValueError, match=r"'q3'.*NaN"):
        cm.compute_metrics(nan, QRELS, dataset="t", task="rerank", variant="v", seed=None, thresholds=THR)
    with pytest.raises(ValueError, match="first_stage"):
        cm.compute_metrics(scores.filter(pl.col("perturbation") != "first_stage"), QRELS,
                           dataset="t", task="rerank", variant="v", seed=None, thresholds=THR)
    v1 = scores.with_columns(pl.col("perturbation").replace({"first_stage": "canonical"}))
    with pytest.raises(ValueError, match="canonical"):
        cm.compute_metrics(v1, QRELS, dataset="t", task="rerank", variant="v", seed=None, thresholds=THR)
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
        cm.compute_metrics(swapped, QRELS, dataset="t", task="rerank", variant="v", seed=None, thresholds=THR)


def test_without_an_artifact_t_star_is_tuned_on_the_development_half():
    from presdep.metrics.thresholds import tune_thresholds

    scores = make_scores(seed=7)
    out = cm.compute_metrics(scores, QRELS, dataset="t", task="rerank", variant="v", seed=None)
    art = tune_thresholds(scores, QRELS)
    assert value(out, "random_shuffle", "t_star") == art["t_star"]
    test = set(out.filter((pl.col("metric") == "jaccard") & pl.col("query_id").is_not_null())["query_id"].unique())
    assert test == set(art["test_queries"]) & set(DOCS)


def test_strongest_relevant_agrees_with_presentations():
    from presdep.contracts.presentations import strongest_relevant as pres_strongest

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
    out = cm.compute_metrics(scores, QRELS, dataset="t", task="rerank", variant="v", seed=None, thresholds=THR)
    for metric in ("tau_psi", "tau_psi_b", "jaccard", "set_flip", "matched_jaccard"):
        sel = out.filter((pl.col("perturbation") == "random_shuffle") & (pl.col("metric") == metric))
        assert sel["value"].null_count() == sel.height  # per query and aggregate
    assert value(out, "random_shuffle", "retained_size") is not None
    assert value(out, "random_shuffle", "warn_single_presentation") == 3


# The position diagnostics of the raw shuffles (presdep.metrics.position; tested in test_position.py).
POSITION = {"spearman_slot_score", "spearman_score_grade", "var_share_doc", "var_share_slot", "var_share_residual",
            "slot_share_chance"}
# The score-grade test's p-value: an aggregate row only (tested in test_position_grade_test.py).
GRADE_TEST = "spearman_score_grade_p_value"


def _names(out: pl.DataFrame, pert: str) -> set[str]:
    """The metric names of a perturbation, the slot profile's per-slot rows folded into one check."""
    names = set(out.filter(pl.col("perturbation") == pert)["metric"])
    slots = {n for n in names if n.startswith("slot_") and n not in POSITION}
    if pert == "random_shuffle":
        kinds = {re.sub(r"_s\d+$", "", n) for n in slots}  # the slot test's two rows are aggregate-only
        assert kinds == {"slot_mean", "slot_ci95", "slot_centred_mean", "slot_centred_ci95",
                         "slot_centred_ci95_clustered_low", "slot_centred_ci95_clustered_high",
                         "slot_p_value", "slot_share_null_mean"}, kinds
        assert GRADE_TEST in names
    else:
        assert not slots
    return names - slots - {GRADE_TEST}


def test_response_task():
    scores = make_scores(seed=2)
    out = cm.compute_metrics(scores, QRELS, dataset="rm", task="response", variant="v", seed=None)
    assert _names(out, "random_shuffle") == {
        "ndcg1_shuffle_mean", "ndcg1_shuffle_worst", "ndcg1_shuffle_best", "tau_psi", "tau_psi_b", "pair_flip",
        "selection_flip", "selected_quality_flip", "selected_quality_mean", "selected_quality_canonical",
        "passes_per_query", "tie_rate", "shuffles_per_query", "prompt_width", "candidates_per_query",
        "ndcg1_order_averaged", "order_averaged_k"} | POSITION
    assert set(out.filter(pl.col("perturbation") == "first_stage")["metric"]) == {"ndcg@1", "ndcg@10", "mrr"}
    qd = qrels_to_dict(QRELS)
    docs, s, _ = block_of(scores, "q2", "random_shuffle")
    # top = max score, ties by smallest id; bottom = min score, ties by largest id
    top = [min(d for d, v in zip(docs, row) if v == max(row)) for row in s.tolist()]
    bottom = [max(d for d, v in zip(docs, row) if v == min(row)) for row in s.tolist()]
    from collections import Counter

    mode = lambda xs: 1 - Counter(xs).most_common(1)[0][1] / len(xs)
    assert value(out, "random_shuffle", "pair_flip", "q2") == pytest.approx(mode(list(zip(top, bottom))))
    assert value(out, "random_shuffle", "selection_flip", "q2") == pytest.approx(mode(top))
    # METHODS v3 item 9: selected quality = selected grade / the prompt's maximum grade (q2: 2)
    quality = [qd["q2"].get(d, 0) / max(qd["q2"].values()) for d in top]
    assert value(out, "random_shuffle", "selected_quality_flip", "q2") == pytest.approx(mode(quality))
    assert value(out, "random_shuffle", "selected_quality_mean", "q2") == pytest.approx(np.mean(quality))
    assert value(out, "random_shuffle", "selected_quality_canonical", "q2") == quality[0]
    docs1, s1, _ = block_of(scores, "q1", "random_shuffle")
    top1 = [min(d for d, v in zip(docs1, row) if v == max(row)) for row in s1.tolist()]
    q1 = [qd["q1"].get(d, 0) / 3 for d in top1]  # q1's best response has grade 3
    assert value(out, "random_shuffle", "selected_quality_mean", "q1") == pytest.approx(np.mean(q1))
    # a prompt whose responses all have grade 0: no selected quality (null), left out of the mean
    zero = pl.concat([QRELS, pl.DataFrame({"query_id": ["q3", "q3"], "doc_id": ["f1", "f2"], "relevance": [0, 0]},
                                          schema=QRELS.schema)])
    out0 = cm.compute_metrics(scores, zero, dataset="rm", task="response", variant="v", seed=None)
    for metric in ("selected_quality_flip", "selected_quality_mean", "selected_quality_canonical"):
        assert value(out0, "random_shuffle", metric, "q3") is None
        assert value(out0, "random_shuffle", metric) == pytest.approx(value(out, "random_shuffle", metric))
    fdocs, fs, fpos = block_of(scores, "q2", "first_stage")
    run = detied(fdocs, fs[0].tolist(), fpos[0].tolist())
    assert value(out, "first_stage", "ndcg@1", "q2") == pytest.approx(trec("ndcg@1", "q2", run))


def test_qa_answers_and_gold_slots():
    scores = make_scores()
    answers = pl.DataFrame(
        {
            "query_id": ["q1"] * 4 + ["q2"] * 3,
            "perturbation": ["random_shuffle"] * 7,
            "presentation": [1, 0, 2, 3, 0, 1, 2],  # stored out of order on purpose
            "answer": ["the paris", "Lyon", "Paris", "Paris, France", "x", "y", "y"],
        }
    )
    # q3 has one answer only: METHODS v3 item 8, its answer flip is 0 (not null)
    answers = pl.concat([answers, pl.DataFrame({"query_id": ["q3"], "perturbation": ["random_shuffle"],
                                                "presentation": [0], "answer": ["z"]})])
    gold = pl.DataFrame({"query_id": ["q1", "q1"], "answer": ["Paris", "Paris France"]})
    out = cm.compute_metrics(scores, QRELS, dataset="h", task="qa", variant="v", seed=None, answers=answers,
                             gold=gold, reader_k=2)
    assert value(out, "random_shuffle", "answer_flip", "q1") == pytest.approx(0.5)
    assert value(out, "random_shuffle", "answer_flip", "q2") == pytest.approx(1 / 3)
    assert value(out, "random_shuffle", "answer_flip", "q3") == 0.0
    assert value(out, "random_shuffle", "answer_flip") == pytest.approx((0.5 + 1 / 3 + 0.0) / 3)
    # canonical = presentation 0 ("Lyon"): EM 0, F1 0; means over presentations 3/4
    assert value(out, "random_shuffle", "em", "q1") == 0.0 and value(out, "random_shuffle", "f1", "q1") == 0.0
    assert value(out, "random_shuffle", "em_mean", "q1") == pytest.approx(3 / 4)
    assert value(out, "random_shuffle", "f1_mean", "q1") == pytest.approx(3 / 4)
    assert out.filter((pl.col("query_id") == "q2") & pl.col("metric").is_in(["em", "f1"])).height == 0
    assert set(out.filter(pl.col("perturbation") == "first_stage")["metric"]) == {"ndcg@10", "recall@2", "recall@5"}
    assert out.filter(pl.col("metric") == "jaccard").height == 0  # QA has no threshold in v2
    # METHODS v3 item 9, per presentation in score order (ties by presented position): the
    # 0-based slot of the best-placed gold paragraph; in the top k if that slot is < k
    qd = qrels_to_dict(QRELS)
    for q in ("q1", "q2"):
        docs, s, pos = block_of(scores, q, "random_shuffle")
        gold_docs = [d for d in docs if qd[q].get(d, 0) >= 1]
        best = [min(sorted(docs, key=lambda d: (-row[docs.index(d)], p[docs.index(d)])).index(g) for g in gold_docs)
                for row, p in zip(s.tolist(), pos.tolist())]
        within = [b for b in best if b < 2]
        assert value(out, "random_shuffle", "gold_in_top2", q) == pytest.approx(len(within) / len(best))
        if within:
            mean = sum(within) / len(within)
            assert value(out, "random_shuffle", "gold_slot_mean", q) == pytest.approx(mean)
            assert value(out, "random_shuffle", "gold_slot_var", q) == pytest.approx(
                sum((b - mean) ** 2 for b in within) / len(within))
        else:
            assert value(out, "random_shuffle", "gold_slot_mean", q) is None
    assert out.filter((pl.col("query_id") == "q3") & pl.col("metric").str.starts_with("gold")).height == 0
    fdocs, fs, fpos = block_of(scores, "q1", "first_stage")
    run = detied(fdocs, fs[0].tolist(), fpos[0].tolist())
    assert value(out, "first_stage", "recall@2", "q1") == pytest.approx(trec("recall@2", "q1", run))


def test_write_metrics_roundtrip_and_files(tmp_path):
    import json

    from presdep.contracts.schemas import write_table

    scores = make_scores()
    out = cm.compute_metrics(scores, QRELS, dataset="t", task="rerank", variant="v", seed=1, thresholds=THR)
    path = cm.write_metrics(out, tmp_path / "m.parquet", {"variant": "v"})
    back = read_table(path, "metrics")
    assert back.height == out.height
    assert read_metadata(path)["params"] == {"variant": "v"}
    probs = [pl.lit(None, dtype=pl.Float32).alias(f"p{g}") for g in range(4)]
    write_table(scores.with_columns(probs), tmp_path / "scores.parquet", "scores")
    write_table(QRELS, tmp_path / "qrels.parquet", "qrels")
    (tmp_path / "t.json").write_text(json.dumps(THR))
    got = cm.metrics_from_files(tmp_path / "scores.parquet", tmp_path / "qrels.parquet", tmp_path / "m2.parquet",
                                dataset="t", task="rerank", variant="v", seed=1, thresholds_path=tmp_path / "t.json")
    assert got.sort("perturbation", "metric", "query_id").equals(out.sort("perturbation", "metric", "query_id"))
    with pytest.raises(ValueError, match="threshold artifact"):
        cm.metrics_from_files(tmp_path / "scores.parquet", tmp_path / "qrels.parquet", tmp_path / "m3.parquet",
                              dataset="t", task="rerank", variant="v", seed=1)
    # a generative listwise scorer's repaired windows: two first-stage aggregate rows after the metrics
    write_table(scores.with_columns(probs), tmp_path / "gen.parquet", "scores",
                scorer_stats={"parse_failures": 3, "windows": 8})
    gen = cm.metrics_from_files(tmp_path / "gen.parquet", tmp_path / "qrels.parquet", tmp_path / "m4.parquet",
                                dataset="t", task="rerank", variant="v", seed=1, thresholds_path=tmp_path / "t.json")
    assert gen.head(out.height).equals(out) and gen.height == out.height + 2
    tail = gen.tail(2)
    assert tail["metric"].to_list() == ["parse_failures", "parse_failure_share"]
    assert tail["value"].to_list() == [3.0, 0.375] and tail["query_id"].null_count() == 2
    assert set(tail["perturbation"]) == {"first_stage"} and tail.schema == out.schema
    assert read_table(tmp_path / "m4.parquet", "metrics").equals(gen)


def test_cli_with_runs_and_scores(tmp_path, shared_data, capsys):
    from presdep.cli import main

    base = shared_data / "trec-dl19"
    lines = open(base / "bm25_trec_run_dl19_top100.txt").read().splitlines()
    keep = [ln for ln in lines if ln.split()[0] in {"1037798", "104861", "1063750", "1106007"}]
    rng = np.random.default_rng(1)
    runs = []
    for m in range(3):
        path = tmp_path / f"run{m}.trec"
        path.write_text("\n".join(f"{q} Q0 {d} 1 {rng.random():.6f} x" for q, _, d, *_ in map(str.split, keep)) + "\n")
        runs.append(str(path))
    first = tmp_path / "first.trec"
    first.write_text("\n".join(keep) + "\n")
    qrels = str(base / "qrels.dl19-passage.txt")
    out = tmp_path / "m.parquet"
    rc = main(["metrics", "--runs", *runs, "--first-stage-run", str(first), "--qrels", qrels,
               "--dataset", "dl19", "--variant", "random", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "tau_psi" in printed and "random_shuffle" in printed
    m = read_table(out, "metrics")
    assert abs(value(m, "random_shuffle", "tau_psi") - 0.5) < 0.05
    assert m.filter(pl.col("metric").str.starts_with("zeng")).height == 0  # presented order unknown
    # missing first-stage run: a clear error, exit code 2
    rc = main(["metrics", "--runs", *runs, "--qrels", qrels, "--dataset", "dl19", "--variant", "random"])
    assert rc == 2
    assert "--first-stage-run" in capsys.readouterr().err


def test_middle_injection_from_the_presentations_module_on_dl19(shared_data):
    """The presentations' middle injection and the metrics agree on the injected doc."""
    from presdep.contracts.presentations import middle_injection
    from presdep.data.trec import read_qrels, read_run

    base = shared_data / "trec-dl19"
    run = read_run(base / "bm25_trec_run_dl19_top100.txt").sort("query_id", "rank")
    qrels = read_qrels(base / "qrels.dl19-passage.txt")
    qd = qrels_to_dict(qrels)
    rows = []
    for (qid,), g in list(run.group_by("query_id", maintain_order=True))[:8]:
        ids, sc = g["doc_id"].to_list(), dict(zip(g["doc_id"], g["score"]))
        rows += _rows(qid, "first_stage", 0, ids, [sc[d] for d in ids])
        for m, order in enumerate(middle_injection(ids, qd[qid])):
            # a presentation-sensitive toy scorer: the score decays with the presented position
            rows += _rows(qid, "middle_injection", m, order, [sc[d] - 0.05 * p for p, d in enumerate(order)])
    scores = pl.DataFrame(rows)
    qids = scores["query_id"].unique().to_list()
    out = cm.compute_metrics(scores, qrels, dataset="dl19", task="rerank", variant="toy", seed=None,
                             thresholds={**THR, "dev_queries": [], "test_queries": qids})
    zeng = out.filter((pl.col("metric") == "zeng_psi") & pl.col("query_id").is_not_null())
    assert zeng.height == 8
    # METHODS: undefined (null) exactly where every bucket mean is 0, i.e. where every
    # middle-injection presentation has nDCG@10 0 (its best is 0)
    best = out.filter((pl.col("perturbation") == "middle_injection") & (pl.col("metric") == "ndcg10_shuffle_best")
                      & pl.col("query_id").is_not_null())
    all_zero = set(best.filter(pl.col("value") == 0)["query_id"])
    assert set(zeng.filter(pl.col("value").is_null())["query_id"]) == all_zero
    defined = zeng["value"].drop_nulls()
    assert defined.len() == 8 - len(all_zero) and ((defined >= 0) & (defined <= 1)).all()
