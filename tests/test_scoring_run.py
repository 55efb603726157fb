"""score_dataset: presentations, contract, BSC, resumability after kill -9."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from presdep.presentations import chunk_positions, random_shuffle, shuffle_seed, stable_seed
from presdep.schemas import read_metadata, read_table
from presdep.scoring import GradeReadout
from presdep.scoring.run import score_dataset
from presdep.scoring.template import load_template
from kill_utils import kill_then_resume


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
    score_dataset(cand, dataset="toy", variant={"scorer": "identity"}, protocol=PROTOCOL, out_path=out)
    df = read_table(out, "scores")
    n_q, n_d, m = 4, 7, PROTOCOL["M"]
    assert df.height == n_q * n_d * (1 + 2 * m)
    counts = df.group_by("perturbation").len().sort("perturbation")
    assert dict(counts.iter_rows()) == {"canonical": n_q * n_d, "random_shuffle": n_q * n_d * m, "within_chunk": n_q * n_d * m}
    # Identity: n - rank, independent of the presentation.
    joined = df.join(cand, on=["query_id", "doc_id"])
    assert (joined["score"] == (n_d - joined["first_stage_rank"]).cast(pl.Float64)).all()
    assert df["p0"].null_count() == df.height
    # Sorted by perturbation, presentation, query_id, position; each presentation a permutation.
    assert df.equals(df.sort("perturbation", "presentation", "query_id", "position"))
    for _, g in df.group_by("perturbation", "presentation", "query_id"):
        assert sorted(g["position"].to_list()) == list(range(n_d))
    # The shuffles are the stable ones.
    g = df.filter((pl.col("perturbation") == "random_shuffle") & (pl.col("presentation") == 1) & (pl.col("query_id") == "q2"))
    base = cand.filter(pl.col("query_id") == "q2").sort("first_stage_rank")["doc_id"].to_list()
    assert g.sort("position")["doc_id"].to_list() == random_shuffle(base, shuffle_seed(13, "toy", "q2", 1))
    canon = df.filter(pl.col("perturbation") == "canonical")
    assert (canon["position"] == canon.join(cand, on=["query_id", "doc_id"])["first_stage_rank"] - 1).all()
    meta = read_metadata(out)
    assert meta["params"]["protocol"]["M"] == 3 and meta["params"]["variant"]["bsc_k"] == 1
    assert not (tmp_path / "s.parquet.partial").exists()


@pytest.mark.parametrize("chunking", ["contiguous", "round_robin"])
def test_prompts_slots_and_texts(tmp_path, chunking):
    cand = make_candidates(2, 8)
    scorer = SlotTextScorer()
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", variant={"scorer": "fake", "chunking": chunking}, protocol=PROTOCOL,
                  out_path=out, scorer=scorer)
    df = read_table(out, "scores")
    seen = list(scorer.prompts)
    # 2 queries x (1 + 2M presentations) x 3 prompts of at most B = 3 documents.
    assert len(seen) == 2 * 7 * 3
    assert all(q.startswith("query ") and 1 <= len(d) <= 3 for q, d in seen)
    parts = chunk_positions(8, 3, chunking)
    for row in df.iter_rows(named=True):
        assert parts[row["prompt"]][row["slot"]] == row["position"]
    # The readout of a row is the fake scorer's for that doc text at that slot.
    texts = dict(zip(cand["doc_id"], cand["doc"]))
    for row in df.head(30).iter_rows(named=True):
        ro = scorer.score_prompts([("q", [""] * row["slot"] + [texts[row["doc_id"]]])])[0][-1]
        assert row["score"] == pytest.approx(ro.score)
        assert row["p3"] == pytest.approx(ro.probs[3], rel=1e-6)
    probs = df.select("p0", "p1", "p2", "p3").to_numpy().sum(axis=1)
    assert np.allclose(probs, 1.0, atol=1e-6)


def test_bsc_averages_k_shuffles(tmp_path):
    cand = make_candidates(2, 6)
    k = 3
    out = tmp_path / "s.parquet"
    proto = {**PROTOCOL, "perturbations": ["random_shuffle"]}
    score_dataset(cand, dataset="toy", variant={"scorer": "fake", "bsc_k": k}, protocol=proto,
                  out_path=out, scorer=SlotTextScorer())
    df = read_table(out, "scores")
    ref = SlotTextScorer()
    q = "q1"
    g = cand.filter(pl.col("query_id") == q).sort("first_stage_rank")
    ids, texts = g["doc_id"].to_list(), dict(zip(g["doc_id"], g["doc"]))
    m = 2
    pres = random_shuffle(ids, shuffle_seed(13, "toy", q, m))
    acc = {d: [] for d in ids}
    first = {}
    for kk in range(k):
        member = random_shuffle(pres, stable_seed(13, "toy", q, "bsc", m, kk))
        for j, pos in enumerate(chunk_positions(6, 3)):
            docs = [member[x] for x in pos]
            for s, (d, ro) in enumerate(zip(docs, ref.score(q, [texts[x] for x in docs]))):
                acc[d].append(ro.score)
                if kk == 0:
                    first[d] = (pos[s], j, s)
    got = df.filter((pl.col("perturbation") == "random_shuffle") & (pl.col("presentation") == m) & (pl.col("query_id") == q))
    for row in got.iter_rows(named=True):
        assert row["score"] == pytest.approx(np.mean(acc[row["doc_id"]]))
        assert (row["position"], row["prompt"], row["slot"]) == first[row["doc_id"]]
    # The canonical row of BSC is a single first-stage pass.
    canon = df.filter((pl.col("perturbation") == "canonical") & (pl.col("query_id") == q)).sort("position")
    single = ref.score(q, [texts[d] for d in ids[:3]])
    assert canon["score"].head(3).to_list() == pytest.approx([r.score for r in single])


def test_middle_injection_and_skip(tmp_path, caplog):
    # Ranks reversed against doc ids: the tie q0d05/q0d03 must go to the smaller id, not rank.
    cand = make_candidates(3, 7).with_columns((8 - pl.col("first_stage_rank")).cast(pl.Int32).alias("first_stage_rank"))
    qrels = pl.DataFrame({"query_id": ["q0", "q0", "q1", "q2"], "doc_id": ["q0d05", "q0d03", "q1d02", "q2d01"],
                          "relevance": [2, 2, 0, 1]}).with_columns(pl.col("relevance").cast(pl.Int32))
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", variant={"scorer": "identity"},
                  protocol={**PROTOCOL, "perturbations": ["middle_injection"]}, out_path=out, qrels=qrels)
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
        score_dataset(cand, dataset="toy", variant={"scorer": "identity"},
                      protocol={**PROTOCOL, "perturbations": ["middle_injection"]}, out_path=out)


def test_bad_inputs(tmp_path):
    cand = make_candidates(1, 3)
    with pytest.raises(ValueError, match="perturbations"):
        score_dataset(cand, dataset="t", variant={"scorer": "identity"},
                      protocol={**PROTOCOL, "perturbations": ["nope"]}, out_path=tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="unknown scorer"):
        score_dataset(cand, dataset="t", variant={"scorer": "nope"}, protocol=PROTOCOL, out_path=tmp_path / "x.parquet")
    dup = pl.concat([cand, cand.head(1)])
    with pytest.raises(ValueError, match="duplicate"):
        score_dataset(dup, dataset="t", variant={"scorer": "identity"}, protocol=PROTOCOL, out_path=tmp_path / "x.parquet")


SLOW_RUN = textwrap.dedent(
    """
    import sys, time
    import polars as pl
    from presdep.scoring.backends import IdentityScorer
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
    score_dataset(cand, dataset="toy", variant={"scorer": "identity"}, protocol=proto, out_path=sys.argv[2], scorer=scorer)
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
    score_dataset(cand, dataset="toy", variant={"scorer": "identity"}, protocol=PROTOCOL, out_path=out)
    assert read_table(out, "scores").height == 2 * 4 * 7
    assert not partial.exists()


def test_template_hash_is_file_hash():
    import hashlib
    from importlib import resources

    data = resources.files("presdep").joinpath("templates", "grade_prompt_v1.txt").read_bytes()
    assert load_template().sha256 == hashlib.sha256(data).hexdigest()
