"""score_dataset: the first-stage pass, presentations, contract, BSC shuffles, resumability after kill -9."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from kill_utils import kill_then_resume

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.presentations import chunk_positions, random_shuffle, shuffle_seed, stable_seed


def paper_oracle(items, m):
    """METHODS v3 item 1, written from its text: the list shuffled by random.Random(m).shuffle."""
    out = list(items)
    random.Random(m).shuffle(out)
    return out
from presdep.contracts.schemas import read_metadata, read_table
from presdep.scoring import GradeReadout
from presdep.scoring.run import score_dataset
from presdep.scoring.template import load_template

# A variant as the validated config hands it over (the schema's defaults filled in).
V = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4, "capcal_beta": 1.0}

def make_candidates(n_queries: int = 4, n_docs: int = 7) -> pl.DataFrame:
    rows = []
    for q in range(n_queries):
        for r in range(1, n_docs + 1):
            rows.append((f"q{q}", f"query {q}", f"q{q}d{r:02d}", f"text of doc {r} for query {q}", r, 10.0 - r))
    return pl.DataFrame(
        rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"], orient="row"
    ).with_columns(pl.col("first_stage_rank").cast(pl.Int32))


PROTOCOL = {"seed": 13, "M": 3, "B": 3, "perturbations": ["random_shuffle", "within_chunk"], "max_doc_chars": 50}


class SlotTextScorer:
    """A fake model: P(g) depends on the slot and on the document text (deterministic)."""

    name = "slot_text"
    template_sha256 = "fake"

    def __init__(self):
        self.prompts: list[tuple[str, list[str]]] = []

    def describe(self):
        return {"scorer": self.name, "model": {"name": "fake"}}

    def score(self, query, docs):
        return self.score_prompts([(query, docs)])[0]

    def score_prompts(self, prompts):
        out = []
        for query, docs in prompts:
            self.prompts.append((query, list(docs)))
            ro = []
            for s, d in enumerate(docs):
                h = stable_seed(0, d) % 1000 / 1000.0
                logits = np.array([0.0, h, 2 * h, 0.3 * s])
                p = np.exp(logits) / np.exp(logits).sum()
                ro.append(GradeReadout(float(p @ np.arange(4)), tuple(float(x) for x in p)))
            out.append(ro)
        return out


def test_identity_rows_and_contract(tmp_path):
    cand = make_candidates()
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}), protocol=Protocol.checked(PROTOCOL), out_path=out)
    df = read_table(out, "scores")
    n_q, n_d, m = 4, 7, PROTOCOL["M"]
    assert df.height == n_q * n_d * (1 + 2 * m)
    counts = df.group_by("perturbation").len().sort("perturbation")
    assert dict(counts.iter_rows()) == {"first_stage": n_q * n_d, "random_shuffle": n_q * n_d * m, "within_chunk": n_q * n_d * m}
    # Identity: n - rank, independent of the presentation.
    joined = df.join(cand, on=["query_id", "doc_id"])
    assert (joined["score"] == (n_d - joined["first_stage_rank"]).cast(pl.Float64)).all()
    assert df["p0"].null_count() == df.height
    # Sorted by perturbation, presentation, query_id, position; each presentation a permutation.
    assert df.equals(df.sort("perturbation", "presentation", "query_id", "position"))
    for _, g in df.group_by("perturbation", "presentation", "query_id"):
        assert sorted(g["position"].to_list()) == list(range(n_d))
    # Every shuffle m of every query is random.Random(m).shuffle of its first-stage list.
    for q in ("q0", "q2"):
        base = cand.filter(pl.col("query_id") == q).sort("first_stage_rank")["doc_id"].to_list()
        for m in range(3):
            g = df.filter((pl.col("perturbation") == "random_shuffle") & (pl.col("presentation") == m) & (pl.col("query_id") == q))
            assert g.sort("position")["doc_id"].to_list() == paper_oracle(base, m)
    first = df.filter(pl.col("perturbation") == "first_stage")
    assert set(first["presentation"]) == {0}
    assert (first["position"] == first.join(cand, on=["query_id", "doc_id"])["first_stage_rank"] - 1).all()
    meta = read_metadata(out)
    assert meta["params"]["protocol"]["M"] == 3 and meta["params"]["variant"]["bsc_k"] == 1
    assert meta["perturbations"] == ["first_stage", "random_shuffle", "within_chunk"]
    assert meta["presentations"] == {"first_stage": 1, "random_shuffle": 3, "within_chunk": 3}
    assert meta["shuffle_rule"] == "paper" and meta["shuffle_queries"] == {"list": None, "queries": 4, "of": 4}
    assert not (tmp_path / "s.parquet.partial").exists()


def test_per_query_shuffle_rule_is_a_named_option(tmp_path):
    """shuffle_rule per_query: presdep's v2 draw per (seed, dataset, query, m), recorded in the metadata."""
    cand = make_candidates()
    out = tmp_path / "s.parquet"
    proto = Protocol.checked({**PROTOCOL, "perturbations": ["random_shuffle"], "shuffle_rule": "per_query"})
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}), protocol=proto, out_path=out)
    df = read_table(out, "scores")
    g = df.filter((pl.col("perturbation") == "random_shuffle") & (pl.col("presentation") == 1) & (pl.col("query_id") == "q2"))
    base = cand.filter(pl.col("query_id") == "q2").sort("first_stage_rank")["doc_id"].to_list()
    assert g.sort("position")["doc_id"].to_list() == random_shuffle(base, shuffle_seed(13, "toy", "q2", 1))
    assert read_metadata(out)["shuffle_rule"] == "per_query"
    with pytest.raises(ValueError, match="shuffle_rule"):
        Protocol.checked({**PROTOCOL, "shuffle_rule": "nope"})


def test_shuffles_run_on_the_fixed_query_list(tmp_path):
    """A dataset's shuffle list: first-stage pass on every query, random shuffles on the listed ones only."""
    import hashlib
    cand = make_candidates(4, 5)
    lst = tmp_path / "list.txt"
    lst.write_text("q3\nq1\nq9\n")  # q9 has no candidates: it is simply not scored
    sha = hashlib.sha256(lst.read_bytes()).hexdigest()
    proto = Protocol.checked({**PROTOCOL, "perturbations": ["random_shuffle"], "shuffle_queries": {"path": str(lst), "sha256": sha}})
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}), protocol=proto, out_path=out)
    df = read_table(out, "scores")
    per = {p: sorted(g["query_id"].unique().to_list()) for (p,), g in df.group_by("perturbation")}
    assert per == {"first_stage": ["q0", "q1", "q2", "q3"], "random_shuffle": ["q1", "q3"]}
    meta = read_metadata(out)
    assert meta["shuffle_queries"] == {"list": {"name": "list", "sha256": sha, "path": str(lst)}, "queries": 2, "of": 4}
    lst.write_text("q3\nq1\n")  # the file changed under its pin: refused, naming the file
    with pytest.raises(ValueError, match="list.txt.*sha256"):
        score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}), protocol=proto,
                      out_path=tmp_path / "t.parquet")


@pytest.mark.parametrize("chunking", ["contiguous", "round_robin"])
def test_prompts_slots_and_texts(tmp_path, chunking):
    cand = make_candidates(2, 8)
    scorer = SlotTextScorer()
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "fake", "chunking": chunking}), protocol=Protocol.checked(PROTOCOL),
                  out_path=out, scorer=scorer)
    df = read_table(out, "scores")
    seen = list(scorer.prompts)
    # 2 queries x (1 + 2M presentations) x 3 prompts of at most B = 3 documents.
    assert len(seen) == 2 * 7 * 3
    assert all(q.startswith("query ") and 1 <= len(d) <= 3 for q, d in seen)
    # Every pass is cut by the variant's chunking, the shuffles too (METHODS v3 item 2).
    for row in df.iter_rows(named=True):
        assert chunk_positions(8, 3, chunking)[row["prompt"]][row["slot"]] == row["position"]
    # The readout of a row is the fake scorer's for that doc text at that slot.
    texts = dict(zip(cand["doc_id"], cand["doc"]))
    for row in df.head(30).iter_rows(named=True):
        ro = scorer.score_prompts([("q", [""] * row["slot"] + [texts[row["doc_id"]]])])[0][-1]
        assert row["score"] == pytest.approx(ro.score)
        assert row["p3"] == pytest.approx(ro.probs[3], rel=1e-6)
    probs = df.select("p0", "p1", "p2", "p3").to_numpy().sum(axis=1)
    assert np.allclose(probs, 1.0, atol=1e-6)


def _direct_readouts(ref, q, order, texts, chunking="contiguous"):
    """Reference: each prompt of ``order`` read directly, cut by ``chunking``."""
    got = {}
    for j, pos in enumerate(chunk_positions(len(order), 3, chunking)):
        docs = [order[x] for x in pos]
        for s, (d, ro) in enumerate(zip(docs, ref.score(q, [texts[x] for x in docs]))):
            got[d] = (ro.score, pos[s], j, s)
    return got


def test_bsc_stores_raw_scores_of_e_times_k_shuffles(tmp_path):
    cand = make_candidates(2, 6)
    k, e = 3, 2
    out = tmp_path / "s.parquet"
    proto = {**PROTOCOL, "perturbations": ["random_shuffle"]}  # M = 3 is not used by BSC
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "fake", "bsc_k": k, "bsc_ensembles": e}), protocol=Protocol.checked(proto),
                  out_path=out, scorer=SlotTextScorer())
    df = read_table(out, "scores")
    shuffles = df.filter(pl.col("perturbation") == "random_shuffle")
    assert sorted(shuffles["presentation"].unique().to_list()) == list(range(e * k))
    ref = SlotTextScorer()
    q = "q1"
    g = cand.filter(pl.col("query_id") == q).sort("first_stage_rank")
    ids, texts = g["doc_id"].to_list(), dict(zip(g["doc_id"], g["doc"]))
    for m in range(e * k):  # presentation m = shuffle m, continuing m = 0..E*K-1 (METHODS v3 item 1)
        want = _direct_readouts(ref, q, paper_oracle(ids, m), texts)
        got = shuffles.filter((pl.col("presentation") == m) & (pl.col("query_id") == q))
        assert got.height == 6
        for row in got.iter_rows(named=True):
            assert (row["score"], row["position"], row["prompt"], row["slot"]) == pytest.approx(want[row["doc_id"]])
    # The first-stage pass of BSC is one pass over the first-stage order.
    first = df.filter((pl.col("perturbation") == "first_stage") & (pl.col("query_id") == q)).sort("position")
    assert first["doc_id"].to_list() == ids
    assert first["score"].to_list() == pytest.approx([want[0] for want in
                                                      (_direct_readouts(ref, q, ids, texts)[d] for d in ids)])
    meta = read_metadata(out)
    assert (meta["bsc_k"], meta["bsc_ensembles"]) == (k, e)
    assert meta["presentations"]["random_shuffle"] == e * k


def test_round_robin_deals_every_pass_round_robin(tmp_path):
    """Round-robin: prompt j of P holds presented positions j, j+P, ... of every pass, the first-stage
    order and each shuffle (METHODS v3 item 2), so its shuffled rows differ from off the shelf's by draw."""
    cand = make_candidates(2, 8)
    proto = {**PROTOCOL, "perturbations": ["random_shuffle"]}
    frames = {}
    for chunking in ("contiguous", "round_robin"):
        out = tmp_path / f"{chunking}.parquet"
        score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "fake", "chunking": chunking}), protocol=Protocol.checked(proto),
                      out_path=out, scorer=SlotTextScorer())
        frames[chunking] = read_table(out, "scores")
    ref, q = SlotTextScorer(), "q0"
    g = cand.filter(pl.col("query_id") == q).sort("first_stage_rank")
    ids, texts = g["doc_id"].to_list(), dict(zip(g["doc_id"], g["doc"]))
    # By hand: 8 documents, B = 3 -> P = 3 prompts: presented positions {0,3,6}, {1,4,7}, {2,5}.
    dealt = {0: [0, 3, 6], 1: [1, 4, 7], 2: [2, 5]}
    for pert, m, order in [("first_stage", 0, ids)] + [("random_shuffle", m, paper_oracle(ids, m)) for m in range(3)]:
        rr = frames["round_robin"].filter((pl.col("perturbation") == pert) & (pl.col("presentation") == m)
                                          & (pl.col("query_id") == q))
        for j, positions in dealt.items():
            got = rr.filter(pl.col("prompt") == j).sort("slot")
            members = [order[x] for x in positions]
            assert got["doc_id"].to_list() == members and got["position"].to_list() == positions
            assert got["score"].to_list() == pytest.approx([r.score for r in ref.score(q, [texts[d] for d in members])])
    shuf = [f.filter(pl.col("perturbation") == "random_shuffle").sort("query_id", "presentation", "doc_id")
            for f in frames.values()]
    assert shuf[0]["position"].to_list() == shuf[1]["position"].to_list()  # the same shuffles ...
    assert not np.allclose(shuf[0]["score"].to_numpy(), shuf[1]["score"].to_numpy())  # ... dealt differently


def test_middle_injection_and_skip(tmp_path, caplog):
    # Ranks reversed against doc ids: the tie q0d05/q0d03 must go to the smaller id, not rank.
    cand = make_candidates(3, 7).with_columns((8 - pl.col("first_stage_rank")).cast(pl.Int32).alias("first_stage_rank"))
    qrels = pl.DataFrame({"query_id": ["q0", "q0", "q1", "q2"], "doc_id": ["q0d05", "q0d03", "q1d02", "q2d01"],
                          "relevance": [2, 2, 0, 1]}).with_columns(pl.col("relevance").cast(pl.Int32))
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}),
                  protocol=Protocol.checked({**PROTOCOL, "perturbations": ["middle_injection"]}), out_path=out, qrels=qrels)
    df = read_table(out, "scores").filter(pl.col("perturbation") == "middle_injection")
    assert sorted(df["query_id"].unique().to_list()) == ["q0", "q2"]  # q1 has no relevant doc
    q0 = df.filter((pl.col("query_id") == "q0") & (pl.col("doc_id") == "q0d03")).sort("presentation")
    assert q0["position"].to_list() == [0, 7 // 2, 6]
    first_stage = cand.filter(pl.col("query_id") == "q0").sort("first_stage_rank")["doc_id"].to_list()
    for m in range(3):
        rest = df.filter((pl.col("query_id") == "q0") & (pl.col("presentation") == m)).sort("position")["doc_id"]
        assert [d for d in rest if d != "q0d03"] == [d for d in first_stage if d != "q0d03"]
    assert read_metadata(out)["middle_injection_skipped"] == ["q1"]
    assert "middle_injection skipped for 1 of 3" in caplog.text
    with pytest.raises(ValueError, match="needs qrels"):
        score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}),
                      protocol=Protocol.checked({**PROTOCOL, "perturbations": ["middle_injection"]}), out_path=out)


def test_bad_inputs(tmp_path):
    cand = make_candidates(1, 3)
    with pytest.raises(ValueError, match="perturbations"):
        score_dataset(cand, dataset="t", run=ScoringRun.checked({**V, "scorer": "identity"}),
                      protocol=Protocol.checked({**PROTOCOL, "perturbations": ["nope"]}), out_path=tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="unknown scorer"):
        score_dataset(cand, dataset="t", run=ScoringRun.checked({**V, "scorer": "nope"}), protocol=Protocol.checked(PROTOCOL), out_path=tmp_path / "x.parquet")
    dup = pl.concat([cand, cand.head(1)])
    with pytest.raises(ValueError, match="duplicate"):
        score_dataset(dup, dataset="t", run=ScoringRun.checked({**V, "scorer": "identity"}), protocol=Protocol.checked(PROTOCOL), out_path=tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="bsc_ensembles"):
        score_dataset(cand, dataset="t", run=ScoringRun.checked({**V, "scorer": "identity", "bsc_k": 2, "bsc_ensembles": 0}),
                      protocol=Protocol.checked(PROTOCOL), out_path=tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"variant lacks \['chunking'\]"):
        score_dataset(cand, dataset="t", run=ScoringRun.checked({k: x for k, x in {**V, "scorer": "identity"}.items() if k != "chunking"}),
                      protocol=Protocol.checked(PROTOCOL), out_path=tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="recalibrates another variant"):
        score_dataset(cand, dataset="t", run=ScoringRun.checked({**V, "scorer": "identity", "calibration": "capcal"}),
                      protocol=Protocol.checked(PROTOCOL), out_path=tmp_path / "x.parquet")


SLOW_RUN = textwrap.dedent(
    """
    import sys, time
    import polars as pl
    from presdep.scoring.backends import IdentityScorer
    from presdep.config.records import Protocol, ScoringRun
    from presdep.scoring.run import score_dataset

    class Slow(IdentityScorer):
        calls = 0

        def score_ranked(self, ranks, n):
            self.calls += 1
            time.sleep(float(sys.argv[3]))
            return super().score_ranked(ranks, n)

    cand = pl.read_parquet(sys.argv[1])
    proto = {"seed": 5, "M": 2, "B": 3, "perturbations": ["random_shuffle", "within_chunk"], "max_doc_chars": 40}
    scorer = Slow()
    variant = {"scorer": "identity", "chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4}
    score_dataset(cand, dataset="toy", run=ScoringRun.checked(variant), protocol=Protocol.checked(proto),
                  out_path=sys.argv[2], scorer=scorer)
    print(scorer.calls)
    """
)


def test_kill_and_resume_gives_identical_file(tmp_path):
    cand = make_candidates(12, 6)
    cpath = tmp_path / "cand.parquet"
    cand.write_parquet(cpath)
    script = tmp_path / "run.py"
    script.write_text(SLOW_RUN)
    ref, out = tmp_path / "ref.parquet", tmp_path / "out.parquet"
    subprocess.run([sys.executable, str(script), str(cpath), str(ref), "0"], check=True, capture_output=True)

    # 10 prompts per query at 20 ms: ~0.2 s per query; kill after 3 queries are flushed.
    n_done, stdout = kill_then_resume(
        [sys.executable, str(script), str(cpath), str(out), "0.02"],
        [sys.executable, str(script), str(cpath), str(out), "0"], out, "q-*.arrow", 3, 12)
    # Only the unfinished queries were scored again (5 presentations x 2 prompts each).
    assert int(stdout.strip()) == (12 - n_done) * 10
    assert pq.read_table(out).equals(pq.read_table(ref))
    assert read_metadata(out) == read_metadata(ref)
    assert out.read_bytes() == ref.read_bytes()


def test_stale_partial_is_discarded(tmp_path):
    cand = make_candidates(2, 4)
    out = tmp_path / "s.parquet"
    partial = tmp_path / "s.parquet.partial"
    partial.mkdir()
    (partial / "fingerprint.json").write_text("{}")
    # A poisoned leftover for q0 must not be reused under a different fingerprint.
    pl.DataFrame({"x": [1]}).write_ipc(partial / "q-bogus.arrow")
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}), protocol=Protocol.checked(PROTOCOL), out_path=out)
    assert read_table(out, "scores").height == 2 * 4 * 7
    assert not partial.exists()


def test_template_hash_is_file_hash():
    import hashlib
    from importlib import resources

    data = resources.files("presdep.scoring").joinpath("templates", "relevance_v2.yaml").read_bytes()
    assert load_template().sha256 == hashlib.sha256(data).hexdigest()


def test_identity_first_stage_pass_on_dl19_gives_the_bm25_ndcg(tmp_path, shared_data):
    """The identity scorer's first-stage pass is the BM25 run: DL19 nDCG@10 = 0.5058 (pytrec_eval)."""
    import pytrec_eval

    from presdep.data.rank_llm import read_rank_llm_json
    from presdep.data.trec import read_qrels

    cand = read_rank_llm_json(shared_data / "trec-dl19" / "bm25_retrieve_results_dl19_top100.json")
    qrels = read_qrels(shared_data / "trec-dl19" / "qrels.dl19-passage.txt")
    out = tmp_path / "dl19.parquet"
    score_dataset(cand, dataset="dl19", run=ScoringRun.checked({**V, "scorer": "identity"}),
                  protocol=Protocol.checked({"seed": 4401, "M": 2, "B": 20, "perturbations": ["random_shuffle"], "max_doc_chars": 1200}),
                  out_path=out)
    first = read_table(out, "scores").filter(pl.col("perturbation") == "first_stage")
    run: dict[str, dict[str, float]] = {}
    for q, d, s in first.select("query_id", "doc_id", "score").iter_rows():
        run.setdefault(q, {})[d] = s
    judged: dict[str, dict[str, int]] = {}
    for q, d, r in qrels.select("query_id", "doc_id", "relevance").iter_rows():
        judged.setdefault(q, {})[d] = int(r)
    run = {q: docs for q, docs in run.items() if q in judged}
    per_q = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10"}).evaluate(run)
    assert len(per_q) == 43
    assert round(float(np.mean([v["ndcg_cut_10"] for v in per_q.values()])), 4) == 0.5058


def test_default_profile_sums_benchmarks_logs_and_cache_counts(tmp_path, caplog):
    """benchmarks/default_profile.py on a hand-made results tree: sums worked out by hand."""
    import importlib.util
    import logging
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "default_profile", Path(__file__).resolve().parents[3] / "benchmarks" / "default_profile.py")
    prof = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prof)

    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    files = {"score/a/x.tsv": "10.50\t0:00:10\t1\t1\t1\t1\t0\t0\t150\t20.00\n",
             "score/b/x.tsv": "4.00\t0:00:04\t1\t1\t1\t1\t0\t0\t90\t-\n",
             "fetch_model/smollm2.tsv": "29.00\t0:00:29\t1\t1\t1\t1\t0\t0\t100\t30.50\n"}
    for rel, row in files.items():
        p = tmp_path / "results" / "benchmarks" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(header + row)
    # One real score job's log line, and a job of another scorer written by hand.
    cand = make_candidates(2, 4)
    with caplog.at_level(logging.INFO, logger="presdep.scoring.run"):
        got = score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}), protocol=Protocol.checked(PROTOCOL),
                            out_path=tmp_path / "results" / "scores" / "bm25" / "toy.parquet", startup_s=1.5)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("profile "))
    assert json.loads(line[len("profile "):]) == got and got["startup_s"] == 1.5 and got["queries"] == 2
    logs = tmp_path / "logs" / "score"
    (logs / "bm25").mkdir(parents=True)
    (logs / "bm25" / "toy.log").write_text("2026 INFO x: start\n2026 INFO presdep.scoring.run: " + line + "\n")
    (logs / "ots").mkdir()
    (logs / "ots" / "toy.log").write_text('2026 INFO run: profile {"prompts": 10, "prompts_read": 4, "tokens_read": 2000, '
                                          '"forward_s": 4.0, "startup_s": 3.0, "model_load_s": 1.0, '
                                          '"cache_hits": 6, "cache_misses": 2}\n')
    (logs / "rr").mkdir()  # an earlier attempt's line, then the finished job's: the last one counts
    (logs / "rr" / "toy.log").write_text('x: profile {"cache_hits": 1, "cache_misses": 1}\n'
                                         'x: profile {"cache_hits": 3, "cache_misses": 5}\n')
    for kind, name, (h, m) in (("read_answers", "ots", (3, 5)), ("read_verdicts", "v", (0, 4))):
        (tmp_path / "logs" / kind).mkdir(parents=True)
        (tmp_path / "logs" / kind / f"{name}.log").write_text(
            f'2026 INFO presdep.scoring.frozen_reader: answer cache {{"hits": {h}, "misses": {m}}}\n')
    rep = prof.report(tmp_path)
    assert rep["answer_cache"] == {"jobs": 2, "hits": 3, "misses": 9, "hit_rate": 0.25}
    assert "answer cache: 3 hits, 9 misses over 2 reading jobs (hit rate 25.0%)" in prof.render(rep)
    assert rep["rules"]["score"] == {"jobs": 2, "wall_s": 14.5, "cpu_s": 20.0, "cpu_unknown": 1}
    assert rep["rules"]["fetch_model"]["cpu_s"] == 30.5 and rep["total_wall_s"] == 43.5
    s = rep["scoring"]
    assert (s["jobs"], s["model_jobs"], s["prompts"], s["prompts_read"]) == (3, 1, 10, 4)
    assert s["tokens_per_s"] == 500.0 and s["startup_s"] == 4.5 and s["forward_s"] == 4.0
    assert rep["read_cache"] == {"jobs": 2, "hits": 9, "misses": 7, "hit_rate": 9 / 16}  # identity uses no cache
    assert "| score | 2 | 14.5 | 20.0 |" in prof.render(rep)
