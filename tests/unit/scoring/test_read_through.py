"""The run's read cache for every probability scorer, batches across queries, and merged adapters.

- A plug-in that declares probabilities (no tokenizer, no transformers) reads through the same
  cache as the transformers backend: BSC re-reads none of the shuffles it shares with off the shelf.
- A job's uncached prompts are sorted by length and cut by a token budget whatever query they
  come from; at batch size 1 the scores are the per-query job's bit for bit, in larger batches
  within the readout's float32 tolerance.
- A student is read with its LoRA merged (in float32) into its own copy of the base weights:
  E[g] equal to the unmerged PeftModel read within 1e-5 in float32, the shared base unchanged;
  ``merge_adapter: auto`` keeps a bfloat16 read unmerged, ``always`` merges it too.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from test_read_cache import PROTO, V, candidates, distinct_prompts, scorer_of, tiny_llama

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.contracts.schemas import read_metadata, read_table
from presdep.scoring import run as run_module
from presdep.scoring.read_through import ReadThrough, TextReads, token_batches
from presdep.scoring.run import score_dataset


@pytest.fixture(scope="module")
def tiny(smollm2_model_dir):
    return tiny_llama(smollm2_model_dir)


class LetterCounts(PromptScorer):
    """A plug-in-style scorer with probabilities of its own: P(grade) of a document from its
    letters and its slot, so a document's score depends on where it is shown. It declares
    ``probabilities`` and has only ``score_prompts``."""

    name = "letter_counts"
    probabilities = True

    def __init__(self):
        self.prompts_read = 0

    def describe(self) -> dict:
        return {"scorer": self.name, "version": 1}

    def score_prompts(self, prompts):
        out = []
        for query, docs in prompts:
            self.prompts_read += 1
            row = []
            for slot, doc in enumerate(docs):
                z = np.array([len(doc) % 7 + 1.0, doc.count("e") + 1.0, slot + 1.0, len(query) % 3 + 1.0])
                p = z / z.sum()
                row.append(GradeReadout(float(p @ np.arange(4.0)), tuple(float(x) for x in p)))
            out.append(row)
        return out


BSC = {**V, "bsc_k": 2, "bsc_ensembles": 2}  # E*K = 4 shuffles, the first M = 2 shared with off the shelf


def _score(scorer, cand, variant, out, cache):
    return score_dataset(cand, dataset="toy", run=ScoringRun.checked(variant), protocol=Protocol.checked(PROTO),
                         out_path=out, scorer=scorer, read_cache=cache)


def test_bsc_reuses_off_the_shelfs_reads_through_the_run_cache_with_a_plugin_scorer(tmp_path):
    cand = candidates(3)
    ots_scorer, bsc_scorer, plain = LetterCounts(), LetterCounts(), LetterCounts()
    _score(ots_scorer, cand, V, tmp_path / "ots.parquet", tmp_path / "cache")
    prof = _score(bsc_scorer, cand, BSC, tmp_path / "bsc.parquet", tmp_path / "cache")
    score_dataset(cand, dataset="toy", run=ScoringRun.checked(BSC), protocol=Protocol.checked(PROTO),
                  out_path=tmp_path / "plain.parquet", scorer=plain)  # no cache: every prompt read
    ots, bsc = read_table(tmp_path / "ots.parquet", "scores"), read_table(tmp_path / "bsc.parquet", "scores")
    shared, bsc_only = distinct_prompts(ots), distinct_prompts(bsc) - distinct_prompts(ots)
    assert bsc_only and shared <= distinct_prompts(bsc)
    assert ots_scorer.prompts_read == len(shared)
    assert bsc_scorer.prompts_read == len(bsc_only)  # the shared shuffles were not read again
    assert prof["cache_misses"] == len(bsc_only) and prof["cache_hits"] > 0
    # A hit is the stored float64 read: the cached job's rows are the uncached job's bit for bit.
    assert pq.read_table(tmp_path / "bsc.parquet").equals(pq.read_table(tmp_path / "plain.parquet"))
    keys = ["perturbation", "presentation", "query_id", "doc_id"]
    joined = ots.join(bsc, on=keys, suffix="_bsc")
    assert joined.height == ots.height and (joined["score"] == joined["score_bsc"]).all()


def test_a_plugin_whose_score_is_not_its_expected_grade_is_refused(tmp_path):
    class Off(LetterCounts):
        def score_prompts(self, prompts):
            return [[GradeReadout(r.score + 0.5, r.probs) for r in row] for row in super().score_prompts(prompts)]

    with pytest.raises(Exception, match=r"differs from E\[g\] of its probabilities by 0.5 .*tolerance 1e-06\)"):
        _score(Off(), candidates(1), V, tmp_path / "s.parquet", tmp_path / "cache")


def test_the_plugin_cache_identity_is_its_description():
    a, b = TextReads(LetterCounts()).cache_identity(), TextReads(LetterCounts()).cache_identity()
    assert a == b and a["describe"] == {"scorer": "letter_counts", "version": 1} and a["key"] == "text"


def test_token_batches_sort_by_length_and_cut_by_padded_tokens():
    lengths = [5, 9, 3, 9, 7, 1]
    assert token_batches(lengths, 8) == [[1, 3, 4, 0, 2, 5]]  # longest first, ties in input order
    assert token_batches(lengths, 2) == [[1, 3], [4, 0], [2, 5]]
    # 20 padded tokens: 2 of length 9 (18), then 2 of 7 (14: a third would be 21), then 3, 1.
    assert token_batches(lengths, 8, 20) == [[1, 3], [4, 0], [2, 5]]
    assert token_batches(lengths, 8, 4) == [[1], [3], [4], [0], [2], [5]]  # over the budget: alone
    for size, budget in ((1, None), (3, 12), (8, 30), (2, 1)):
        got = token_batches(lengths, size, budget)
        assert sorted(i for b in got for i in b) == list(range(len(lengths)))
        for b in got:
            assert len(b) <= size and (budget is None or len(b) == 1 or len(b) * max(lengths[i] for i in b) <= budget)


class Recording:
    """Keeps every batch a TransformersScorer reads: the query of each of its prompts."""

    def __init__(self, sc):
        import re

        self.batches = []
        inner = sc.read_built

        def read_built(built):
            self.batches.append([re.search(r"question number \d+", sc.tokenizer.decode(b.ids))[0] for b in built])
            return inner(built)

        sc.read_built = read_built


def test_batches_span_queries_and_scores_equal_the_per_query_job_at_batch_size_1(tmp_path, tiny, monkeypatch):
    cand = candidates(4)
    across = scorer_of(tiny, batch_size=1)
    _score(across, cand, V, tmp_path / "across.parquet", None)
    monkeypatch.setattr(run_module, "CROSS_QUERY_PROMPTS", 1)  # one query per call, as before
    alone = scorer_of(tiny, batch_size=1)
    _score(alone, cand, V, tmp_path / "alone.parquet", None)
    assert pq.read_table(tmp_path / "across.parquet").equals(pq.read_table(tmp_path / "alone.parquet"))


def test_larger_batches_span_queries_within_the_float32_tolerance(tmp_path, tiny):
    cand = candidates(4)
    one = scorer_of(tiny, batch_size=1)
    _score(one, cand, V, tmp_path / "one.parquet", tmp_path / "c1")
    big = scorer_of(tiny, batch_size=6)
    big.batch_tokens = 6 * 80
    rec = Recording(big)
    _score(big, cand, V, tmp_path / "big.parquet", tmp_path / "c6")
    # Some batch holds prompts of two queries (the query text opens every prompt's ids).
    assert any(len(set(b)) > 1 for b in rec.batches)
    assert all(len(b) <= 6 for b in rec.batches) and len(rec.batches) < big.prompts_read
    a, b = read_table(tmp_path / "one.parquet", "scores"), read_table(tmp_path / "big.parquet", "scores")
    keys = ["perturbation", "presentation", "query_id", "doc_id"]
    j = a.join(b, on=keys, suffix="_b")
    assert j.height == a.height
    # Right padding and causal attention: real tokens never see a pad; only float32 kernel
    # order differs with the batch shape (docs/guide/speed.md#read-cache: under 1e-5 of E[g]).
    assert (j["score"] - j["score_b"]).abs().max() < 1e-5
    assert (j["position"] == j["position_b"]).all()


# ---------------------------------------------------------------- merged adapters


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory, tiny):
    from peft import LoraConfig, get_peft_model

    model, _ = tiny
    import copy

    torch.manual_seed(1)
    peft = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                           target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():  # a trained-looking adapter: B is zero at init, so give it weights
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    out = tmp_path_factory.mktemp("adapter") / "student"
    peft.save_pretrained(out)
    return out


def test_a_merged_student_reads_as_the_unmerged_one_and_leaves_the_shared_base_alone(tiny, adapter_dir):
    from presdep.scoring.backends import TransformersScorer
    from presdep.scoring.merged_adapter import merged_student, unmerged_student

    base, tok = tiny
    before = {k: v.clone() for k, v in base.state_dict().items()}
    merged = merged_student(base, adapter_dir, shared=True)
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())  # the shared base is untouched
    assert not any("lora" in n for n, _ in merged.named_parameters())  # plain weights: one matmul each
    import copy

    unmerged = unmerged_student(copy.deepcopy(base), adapter_dir)
    prompts = [(f"question number {q}", [f"doc {q} {k} water boils" for k in range(3)]) for q in range(4)]
    read = {name: np.stack(TransformersScorer(m, tok, max_doc_chars=60, batch_size=1).slot_probs(prompts))
            for name, m in (("merged", merged), ("unmerged", unmerged), ("base", base))}
    grades = np.arange(4.0)
    assert np.abs(read["merged"] @ grades - read["unmerged"] @ grades).max() < 1e-5
    assert np.abs(read["merged"] @ grades - read["base"] @ grades).max() > 1e-3  # the adapter does change scores


def test_auto_merges_float32_reads_only_and_always_merges_a_bfloat16_one_in_float32(tiny, adapter_dir):
    import copy

    from presdep.scoring.merged_adapter import load_student, merges

    base, _ = tiny
    assert merges("auto", torch.float32) and not merges("auto", torch.bfloat16) and merges(None, torch.float32)
    assert merges("always", torch.bfloat16) and not merges("never", torch.float32)
    with pytest.raises(Exception, match="merge_adapter"):
        merges("sometimes", torch.float32)
    asked = []

    def load_base(dtype):
        asked.append(dtype)
        return copy.deepcopy(base).to(dtype)

    kept = load_student(load_base, adapter_dir, choice="auto", dtype=torch.bfloat16)
    assert type(kept).__name__ == "PeftModel" and asked == [torch.bfloat16]
    merged = load_student(load_base, adapter_dir, choice="always", dtype=torch.bfloat16)
    assert asked[-1] == torch.float32  # the merge is computed in float32 ...
    assert {p.dtype for p in merged.parameters()} == {torch.bfloat16}  # ... and the read is bfloat16
    assert not any("lora" in n for n, _ in merged.named_parameters())
    exact = load_student(load_base, adapter_dir, choice="auto", dtype=torch.float32)
    assert not any("lora" in n for n, _ in exact.named_parameters())
    for (n, a), (_, b) in zip(exact.named_parameters(), merged.named_parameters()):
        assert torch.equal(a.to(torch.bfloat16), b), n  # one rounding of the float32 merge


def test_the_cache_identity_names_the_adapter_and_the_merged_read(tiny, adapter_dir):
    from presdep.scoring.backends import TransformersScorer

    model, tok = tiny
    desc = {"adapter": str(adapter_dir), "adapter_sha256": "a" * 64, "adapter_read": "merged in float32"}
    ident = TransformersScorer(model, tok, model_desc=desc, model_identity={"m": 1}).cache_identity()
    base = TransformersScorer(model, tok, model_identity={"m": 1}).cache_identity()
    assert ident["adapter_sha256"] == "a" * 64 and ident["adapter_read"] == "merged in float32"
    assert base["adapter_sha256"] is None and "adapter_read" not in base


def test_the_run_wraps_the_scorer_once_and_keeps_its_counters(tmp_path, tiny):
    sc = scorer_of(tiny, batch_size=2)
    prof = _score(sc, candidates(2), V, tmp_path / "s.parquet", tmp_path / "cache")
    assert prof["reads"] == sc.prompts_read > 0 and prof["cache_misses"] == sc.prompts_read
    wrapped = ReadThrough(sc, tmp_path / "cache")
    assert wrapped.name == "transformers" and wrapped.cache.key == read_metadata(tmp_path / "s.parquet")[
        "read_cache"]["identity_key"]
    assert pl.read_parquet(tmp_path / "s.parquet").height == 2 * 5 * 3


def test_a_scorer_without_probabilities_is_not_wrapped_even_with_a_cache_of_its_own(tmp_path):
    class PairCounts(PromptScorer):  # like pairrm: its own in-memory cache, scores without probabilities
        name = "pair_counts"

        def __init__(self):
            self.cache = {}

        def score_prompts(self, prompts):
            return [[GradeReadout(float(len(d) + slot), None) for slot, d in enumerate(docs)] for _, docs in prompts]

    prof = _score(PairCounts(), candidates(2), {**V, "scorer": "pairrm"}, tmp_path / "s.parquet", tmp_path / "cache")
    assert "cache_hits" not in prof and "read_cache" not in read_metadata(tmp_path / "s.parquet")
    assert not (tmp_path / "cache").exists()
