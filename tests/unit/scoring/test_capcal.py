"""CapCal: the calibration rule by hand, per-query content-free probes, reuse of stored probabilities."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.presentations import stable_seed
from presdep.contracts.schemas import read_metadata, read_table
from presdep.scoring import GradeReadout
from presdep.scoring.capcal import calibrate_probs, calibrate_scores, calibrate_scores_file, entropy_nats
from presdep.scoring.run import score_dataset

# A variant as the validated config hands it over (the schema's defaults filled in).
V = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4, "capcal_beta": 1.0}

PROTOCOL = {"seed": 3, "M": 2, "B": 3, "perturbations": ["random_shuffle"], "max_doc_chars": 60}


def make_candidates(n_queries: int = 3, n_docs: int = 7) -> pl.DataFrame:
    rows = [(f"q{q}", f"query number {q}", f"q{q}d{r}", f"document {r} of query {q}", r, 1.0 / r)
            for q in range(n_queries) for r in range(1, n_docs + 1)]
    return pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"],
                        orient="row").with_columns(pl.col("first_stage_rank").cast(pl.Int32))


class RecordingScorer:
    """A fake model whose P(g) depends on the query, the slot, the prompt size and the text;
    it records every prompt it is asked to read."""

    name = "recording"
    template_sha256 = "t" * 64

    def __init__(self, model_name: str = "fake"):
        self.prompts: list[tuple[str, list[str]]] = []
        self.model_name = model_name

    def describe(self):
        return {"scorer": self.name, "model": {"name": self.model_name}}

    @staticmethod
    def probs(query: str, docs: list[str], s: int) -> np.ndarray:
        h = stable_seed(1, query, docs[s]) % 997 / 997.0
        logits = np.array([0.2 * s, h, 1.5 * h, 0.1 * len(docs) - 0.05 * s])
        return np.exp(logits) / np.exp(logits).sum()

    def score_prompts(self, prompts):
        out = []
        for query, docs in prompts:
            self.prompts.append((query, list(docs)))
            ro = []
            for s in range(len(docs)):
                p = self.probs(query, list(docs), s)
                ro.append(GradeReadout(float(p @ np.arange(4)), tuple(float(x) for x in p)))
            out.append(ro)
        return out

    def score(self, query, docs):
        return self.score_prompts([(query, docs)])[0]


def hand_calibrate(p, q, beta=1.0, eps=1e-8):  # METHODS v3 item 7: epsilon 1e-8
    """METHODS.md, written out: alpha = beta*H(p) in nats; p' = p - alpha(q_s - 1/4); clip; renormalise."""
    h = -sum(x * math.log(x) for x in p if x > 0)
    shifted = [max(p[g] - beta * h * (q[g] - 0.25), eps) for g in range(4)]
    z = sum(shifted)
    return [x / z for x in shifted]


def test_capcal_rule_by_hand():
    p = np.array([[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]])
    q = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    # Row 0 by hand: H = -(0.7 ln 0.7 + 3 * 0.1 ln 0.1) = 0.940447...
    h0 = 0.9404479886553263
    assert entropy_nats(p[:1])[0] == pytest.approx(h0, abs=1e-12)
    # q - 1/4 = (-.15, -.05, .05, .15); grade 3: 0.1 - 0.15 H = -0.041 < 0 is clipped to eps.
    want0 = np.array([0.7 + 0.15 * h0, 0.1 + 0.05 * h0, 0.1 - 0.05 * h0, 1e-8])
    want0 = want0 / want0.sum()
    got = calibrate_probs(p, q)
    np.testing.assert_allclose(got[0], want0, rtol=1e-12)
    np.testing.assert_allclose(got[1], hand_calibrate(p[1], q[1]), rtol=1e-12)
    # A uniform prior changes nothing; the shift moves mass away from the prior's favourite.
    np.testing.assert_allclose(calibrate_probs(p, np.full((2, 4), 0.25)), p)
    assert got[1, 0] < 0.25 and got[1, 3] > 0.25
    # Clipping: a large shift is floored at eps, then renormalised.
    # p = (0.97, .01, .01, .01), q = (0, 0, 0, 1): H = 0.16770..., so grade 3 gets
    # 0.01 - 0.75 H < 0 -> eps; the others gain 0.25 H; then the four are renormalised.
    clipped = calibrate_probs(np.array([[0.97, 0.01, 0.01, 0.01]]), np.array([[0, 0, 0, 1.0]]))
    h = -(0.97 * math.log(0.97) + 3 * 0.01 * math.log(0.01))  # 0.16770...
    by_hand = np.array([0.97 + 0.25 * h, 0.01 + 0.25 * h, 0.01 + 0.25 * h, 1e-8])
    np.testing.assert_allclose(clipped[0], by_hand / by_hand.sum(), rtol=1e-9)


def _off_the_shelf(tmp_path, cand, proto=PROTOCOL):
    src = tmp_path / "off_the_shelf.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "fake"}), protocol=Protocol.checked(proto), out_path=src,
                  scorer=RecordingScorer())
    cpath = tmp_path / "candidates.parquet"
    cand.write_parquet(cpath)
    return src, cpath


def test_capcal_probes_only_and_matches_the_formula(tmp_path):
    cand = make_candidates(3, 7)  # B = 3: prompts of 3, 3 and 1 documents
    src, cpath = _off_the_shelf(tmp_path, cand)
    out = tmp_path / "capcal.parquet"
    probe = RecordingScorer()
    calibrate_scores_file(source_path=src, candidates_path=cpath, out_path=out, dataset="toy",
                          run=ScoringRun.checked({**V, "scorer": "fake", "calibration": "capcal"}), protocol=Protocol.checked(PROTOCOL), scorer=probe)
    # No document is read again: every prompt is a content-free probe, one per (query, prompt size).
    assert probe.prompts and all(all(d == "" for d in docs) for _, docs in probe.prompts)
    assert sorted((q, len(d)) for q, d in probe.prompts) == sorted(
        (f"query number {q}", b) for q in range(3) for b in (1, 3))
    raw = read_table(src, "scores")
    got = read_table(out, "scores")
    keys = ["query_id", "doc_id", "perturbation", "presentation", "position", "prompt", "slot"]
    assert got.select(keys).equals(raw.select(keys))  # identical presentations
    queries = dict(zip(cand["query_id"], cand["query"]))
    sizes = raw.with_columns(pl.len().over("query_id", "perturbation", "presentation", "prompt").alias("size"))
    for r, g in zip(sizes.iter_rows(named=True), got.iter_rows(named=True)):
        p = [float(r[f"p{k}"]) for k in range(4)]
        q = RecordingScorer.probs(queries[r["query_id"]], [""] * r["size"], r["slot"])
        want = hand_calibrate(p, q)
        assert g["score"] == pytest.approx(sum(k * x for k, x in enumerate(want)), abs=1e-9)
        assert [g[f"p{k}"] for k in range(4)] == pytest.approx(want, abs=1e-6)
    # Calibration moved the scores (the check could not pass with raw scores copied).
    assert not np.allclose(got["score"].to_numpy(), raw["score"].to_numpy())
    meta = read_metadata(out)
    assert meta["capcal"]["probe_prompts"] == 6 and meta["capcal"]["reuses"] == str(src)
    assert meta["perturbations"] == ["first_stage", "random_shuffle"]
    assert not (tmp_path / "capcal.parquet.partial").exists()


def test_capcal_prior_is_cached_per_query_text(tmp_path):
    """Two query ids with one text share one prior: probed once per prompt size (METHODS v3 item 7)."""
    cand = make_candidates(3, 7).with_columns(
        pl.when(pl.col("query_id") == "q2").then(pl.lit("query number 0")).otherwise(pl.col("query")).alias("query"))
    src, _ = _off_the_shelf(tmp_path, cand)
    probe = RecordingScorer()
    calibrate_scores(read_table(src, "scores"), dict(zip(cand["query_id"], cand["query"])), probe)
    assert sorted((q, len(d)) for q, d in probe.prompts) == sorted(
        (f"query number {q}", b) for q in (0, 1) for b in (1, 3))


def test_capcal_refuses_another_model_protocol_or_run(tmp_path):
    cand = make_candidates(2, 4)
    src, cpath = _off_the_shelf(tmp_path, cand)
    kw = dict(source_path=src, candidates_path=cpath, out_path=tmp_path / "c.parquet", dataset="toy",
              run=ScoringRun.checked({**V, "scorer": "fake", "calibration": "capcal"}))
    with pytest.raises(ValueError, match="another model"):
        calibrate_scores_file(**kw, protocol=Protocol.checked(PROTOCOL), scorer=RecordingScorer("other"))
    with pytest.raises(ValueError, match="B: 3 there vs 4 here"):
        calibrate_scores_file(**kw, protocol=Protocol.checked({**PROTOCOL, "B": 4}), scorer=RecordingScorer())
    ident = tmp_path / "identity.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}), protocol=Protocol.checked(PROTOCOL), out_path=ident)
    with pytest.raises(ValueError, match="needs grade probabilities"):
        calibrate_scores(read_table(ident, "scores"), dict(zip(cand["query_id"], cand["query"])), RecordingScorer())
    bsc = tmp_path / "bsc.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "fake", "bsc_k": 2}), protocol=Protocol.checked(PROTOCOL), out_path=bsc,
                  scorer=RecordingScorer())
    with pytest.raises(ValueError, match="single-pass run"):
        calibrate_scores_file(**{**kw, "source_path": bsc}, protocol=Protocol.checked(PROTOCOL), scorer=RecordingScorer())


def test_capcal_resumes_from_flushed_priors(tmp_path):
    cand = make_candidates(3, 4)
    src, _ = _off_the_shelf(tmp_path, cand)
    rows, queries = read_table(src, "scores"), dict(zip(cand["query_id"], cand["query"]))
    first = RecordingScorer()
    done = tmp_path / "done"
    done.mkdir()
    ref, priors = calibrate_scores(rows, queries, first, done_dir=done)
    assert len(list(done.glob("prior-*.json"))) == 3
    # A second run over the same folder probes nothing and gives the same rows.
    again = RecordingScorer()
    out, priors2 = calibrate_scores(rows, queries, again, done_dir=done)
    assert again.prompts == [] and out.equals(ref) and priors2 == priors


def test_a_resumed_capcal_leaves_the_read_cache_an_uninterrupted_one_leaves(tmp_path):
    """The probes of the priors a killed run flushed are not asked for again, yet the journal in
    the resume folder puts them in the job's shard: the cache's files equal an uninterrupted run's."""
    from presdep.scoring.read_through import with_read_cache

    cand = make_candidates(3, 4)
    src, _ = _off_the_shelf(tmp_path, cand)
    rows, queries = read_table(src, "scores"), dict(zip(cand["query_id"], cand["query"]))

    def calibrate(cache_dir, done, rows):
        scorer = with_read_cache(RecordingScorer(), cache_dir, declared=True)
        scorer.cache.keep_journal(done)
        out = calibrate_scores(rows, queries, scorer, done_dir=done, cache=scorer.cache)
        return scorer, out

    whole_done, done = tmp_path / "whole-done", tmp_path / "done"
    whole_done.mkdir()
    done.mkdir()
    whole, (ref, _) = calibrate(tmp_path / "whole", whole_done, rows)
    whole.cache.write_job_shard()
    killed, _ = calibrate(tmp_path / "cache", done, rows.filter(pl.col("query_id") == "q0"))  # q0's prior flushed
    del killed  # killed: no job shard
    again, (out, _) = calibrate(tmp_path / "cache", done, rows)
    again.cache.write_job_shard()
    assert out.equals(ref) and {q for q, _ in again.prompts} == {queries["q1"], queries["q2"]}

    def files(root):
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}
    assert files(tmp_path / "cache") == files(tmp_path / "whole") and len(files(tmp_path / "whole")) == 1


def test_capcal_job_needs_the_scores_it_reuses(tmp_path):
    from presdep.scoring.job import score_dataset_files

    cand = make_candidates(1, 3)
    cpath = tmp_path / "c.parquet"
    cand.write_parquet(cpath)
    with pytest.raises(ValueError, match="needs the scores it reuses .*'toy'"):
        score_dataset_files(candidates_path=cpath, qrels_path=None, out_path=tmp_path / "o.parquet", dataset="toy",
                            run=ScoringRun.checked({**V, "scorer": "transformers", "calibration": "capcal"}),
                            protocol=Protocol.checked(PROTOCOL))
    src, _ = _off_the_shelf(tmp_path, cand)
    with pytest.raises(ValueError, match="query 'q0', which is not in the candidates"):
        calibrate_scores(read_table(src, "scores"), {}, RecordingScorer())
