"""score_pools: the sampled queries' three lists, cut at B, read in one scorer call."""

from __future__ import annotations

import hashlib
import math

import polars as pl
import pytest

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.contracts.pool_presentations import drop_rank, sample_queries
from presdep.scoring import GradeReadout
from presdep.scoring.pool_run import POOL_SCORE_SCHEMA, score_pools
from presdep.scoring.read_through import with_read_cache
from presdep.scoring.run import score_dataset


def text_value(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8 * 3


class TextScorer:
    """Scores depend on the document text alone; records every call."""

    name = "text"

    def __init__(self):
        self.calls: list[list[tuple[str, list[str]]]] = []

    def score_prompts(self, prompts):
        self.calls.append([(q, list(docs)) for q, docs in prompts])
        return [[GradeReadout(text_value(d)) for d in docs] for _, docs in prompts]


def make_candidates(sizes: dict[str, int]) -> pl.DataFrame:
    rows = [(q, f"query {q}", f"{q}-d{r:03d}", f"  text of\tdoc {r} for {q}  ", r)
            for q, n in sizes.items() for r in range(n, 0, -1)]  # listed bottom-up: the job sorts by rank
    return pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank"], orient="row")


SIZES = {"qa": 105, "qb": 101, "qc": 50, "qd": 120}


def test_three_lists_per_sampled_query_in_first_stage_order():
    scorer = TextScorer()
    got = score_pools(make_candidates(SIZES), scorer, b=20, chunking="contiguous", seed=3, query_sample_seed=5,
                      queries=2)
    assert got.skipped == 1  # qc has 50 candidates
    sampled = sample_queries(["qa", "qb", "qd"], 5, 2)
    rows = got.scores
    assert rows.schema == pl.Schema(POOL_SCORE_SCHEMA)
    assert rows["query_id"].unique(maintain_order=True).to_list() == sampled
    for q in sampled:
        drop = drop_rank(3, q)
        mine = rows.filter(pl.col("query_id") == q)
        assert set(mine["drop_rank"].to_list()) == {drop}
        lists = {p: mine.filter(pl.col("pool") == p).sort("position")["doc_id"].to_list()
                 for p in ("canonical", "replace", "drop")}
        ids = [f"{q}-d{r:03d}" for r in range(1, 102)]
        assert lists["canonical"] == ids[:100]
        assert lists["drop"] == ids[:drop] + ids[drop + 1:100]
        assert lists["replace"] == lists["drop"] + [ids[100]]
        for p, n in (("canonical", 100), ("replace", 100), ("drop", 99)):
            assert mine.filter(pl.col("pool") == p)["position"].to_list() == list(range(n))


def test_one_scorer_call_with_every_prompt_cut_at_b():
    scorer = TextScorer()
    score_pools(make_candidates(SIZES), scorer, b=20, chunking="contiguous", seed=3, query_sample_seed=5,
                queries=3, max_doc_chars=12)
    assert len(scorer.calls) == 1
    prompts = scorer.calls[0]
    assert len(prompts) == 3 * (5 + 5 + 5)  # ceil(100/20) twice and ceil(99/20) per query
    assert [len(d) for _, d in prompts[:15]] == [20] * 10 + [20, 20, 20, 20, 19]
    assert all(len(doc) <= 12 and "  " not in doc for _, docs in prompts for doc in docs)  # as the score job cuts


def test_round_robin_chunking_deals_each_list():
    scorer = TextScorer()
    got = score_pools(make_candidates({"qa": 101}), scorer, b=30, chunking="round_robin", seed=3,
                      query_sample_seed=5, queries=1)
    prompts = scorer.calls[0]
    assert [len(d) for _, d in prompts] == [25] * 4 + [25] * 4 + [25, 25, 25, 24]
    canonical = got.scores.filter(pl.col("pool") == "canonical").sort("position")["doc_id"].to_list()
    first_prompt_docs = prompts[0][1]
    assert first_prompt_docs[1] == " ".join(f"text of doc {5} for qa".split())  # positions 0, 4, 8, ...
    assert canonical[4] == "qa-d005"


def test_text_only_scores_are_the_same_in_every_list():
    got = score_pools(make_candidates(SIZES), TextScorer(), b=1, chunking="contiguous", seed=3,
                      query_sample_seed=5, queries=3).scores
    by_doc = got.group_by("query_id", "doc_id").agg(pl.col("score").n_unique().alias("n"))
    assert by_doc["n"].max() == 1
    first = got.row(0, named=True)
    assert math.isclose(first["score"], text_value(" ".join(f"text of doc 1 for {first['query_id']}".split())))


def test_no_eligible_query_is_refused():
    with pytest.raises(InvalidInput, match="no query has 101 candidates"):
        score_pools(make_candidates({"qc": 50}), TextScorer(), b=20, chunking="contiguous", seed=0,
                    query_sample_seed=0, queries=10)


def test_a_scorer_returning_too_few_prompts_is_an_error():
    class Short(TextScorer):
        def score_prompts(self, prompts):
            return super().score_prompts(prompts)[:-1]

    with pytest.raises(RuntimeError, match="returned"):
        score_pools(make_candidates({"qa": 101}), Short(), b=20, chunking="contiguous", seed=0,
                    query_sample_seed=0, queries=1)


class CountingProbabilities:
    """A scorer whose reads are grade probabilities (so it reads through the read cache); counts prompts read."""

    name = "counting_probabilities"
    probabilities = True

    def __init__(self):
        self.prompts_read = 0

    def describe(self) -> dict:
        return {"scorer": self.name, "version": 1}

    def score_prompts(self, prompts):
        self.prompts_read += len(prompts)
        out = []
        for _, docs in prompts:
            row = []
            for slot, doc in enumerate(docs):
                z = [len(doc) % 5 + 1.0, doc.count("o") + 1.0, slot + 1.0, len(docs) + 1.0]
                p = tuple(x / sum(z) for x in z)
                row.append(GradeReadout(sum(g * x for g, x in enumerate(p)), p))
            out.append(row)
        return out


def test_canonical_prompts_are_read_cache_hits_after_a_score_job(tmp_path):
    cand = make_candidates({"qa": 101, "qb": 103})
    variant = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 2, "capcal_beta": 1.0,
               "scorer": "transformers"}
    protocol = {"seed": 0, "M": 1, "B": 20, "perturbations": [], "max_doc_chars": 40}
    job = CountingProbabilities()
    score_dataset(cand, dataset="toy", run=ScoringRun.checked(variant), protocol=Protocol.checked(protocol),
                  out_path=tmp_path / "scores.parquet", scorer=job, read_cache=tmp_path / "cache")
    assert job.prompts_read == 2 * 6  # the first-stage pass: ceil(101/20) = ceil(103/20) = 6 prompts

    pools = CountingProbabilities()
    cached = with_read_cache(pools, tmp_path / "cache")
    score_pools(cand, cached, b=20, chunking="contiguous", seed=1, query_sample_seed=0, queries=2, max_doc_chars=40)
    # Canonical: the job's first 5 prompts. Replace and drop repeat canonical's prompts before
    # the drop and each other's up to position 79; qa drops rank 62 (new: replace 3-4, drop 4),
    # qb rank 10 (new: replace 0-4, drop 4).
    assert (drop_rank(1, "qa"), drop_rank(1, "qb")) == (62, 10)
    assert pools.prompts_read == 3 + 6
    again = CountingProbabilities()
    score_pools(cand, with_read_cache(again, tmp_path / "cache"), b=20, chunking="contiguous", seed=1,
                query_sample_seed=0, queries=2, max_doc_chars=40)
    assert again.prompts_read == 0
