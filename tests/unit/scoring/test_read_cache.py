"""The read cache: bit-identical hits, one read per distinct prompt across variants, runs,
max_queries edits and kills, and concurrent writers leaving one valid entry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from scorers_tiny import tiny_llama

from presdep.candidates.fixtures import query_subset
from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.schemas import read_metadata, read_table
from presdep.scoring.read_cache import ReadCache, entry_key
from presdep.scoring.run import score_dataset

V = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 2, "capcal_beta": 1.0,
     "scorer": "transformers"}
PROTO = {"seed": 7, "M": 2, "B": 2, "perturbations": ["random_shuffle"], "max_doc_chars": 60}
IDENT = {"model": {"test": "tiny-llama-seed0"}, "dtype": "float32"}
WORDS = "water boils lower altitude pressure kettle steam mountain sea level degrees cooking".split()


def candidates(n_queries: int, n_docs: int = 5) -> pl.DataFrame:
    rows = []
    for q in range(n_queries):
        for r in range(1, n_docs + 1):
            doc = " ".join(WORDS[(q * 3 + r * k) % len(WORDS)] for k in range(1, 6))
            rows.append((f"q{q}", f"question number {q}", f"q{q}d{r}", f"{doc} {q}-{r}", r, 1.0 / r))
    return pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"],
                        orient="row").with_columns(pl.col("first_stage_rank").cast(pl.Int32))


@pytest.fixture(scope="module")
def tiny(smollm2_model_dir):
    return tiny_llama(smollm2_model_dir)


def scorer_of(tiny, batch_size=3):
    from presdep.scoring.backends import TransformersScorer

    model, tok = tiny
    return TransformersScorer(model, tok, max_doc_chars=60, batch_size=batch_size, model_identity=IDENT["model"])


def distinct_prompts(df: pl.DataFrame, query_ids=None) -> set[tuple[str, tuple[str, ...]]]:
    """The oracle's count of model work: distinct (query, doc ids in slot order) prompts of a scores table."""
    out = set()
    for (qid, *_), g in df.group_by("query_id", "perturbation", "presentation", "prompt"):
        if query_ids is None or qid in query_ids:
            out.add((qid, tuple(g.sort("slot")["doc_id"].to_list())))
    return out


def run(tiny, cand, out, cache_dir, variant=V, batch_size=3):
    sc = scorer_of(tiny, batch_size)
    # The job's profile (its read-cache counters: the scores file names the cache, not what it hit).
    sc.job_profile = score_dataset(cand, dataset="toy", run=ScoringRun.checked(variant),
                                   protocol=Protocol.checked(PROTO), out_path=out, scorer=sc, read_cache=cache_dir)
    return sc


def test_entries_round_trip_bit_for_bit(tmp_path):
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(4), size=5)
    c = ReadCache(tmp_path, IDENT)
    k = entry_key([1, 2, 3], [2])
    assert entry_key([1, 2, 3], [1]) != k and entry_key([1, 2, 4], [2]) != k
    c.put(k, p)
    shard = c.flush()
    assert shard is not None and shard.parent == tmp_path / c.key
    again = ReadCache(tmp_path, IDENT)
    assert len(again) == 1 and again.get(k).tobytes() == p.tobytes()
    assert ReadCache(tmp_path, {**IDENT, "dtype": "bfloat16"}).get(k) is None  # dtype is part of the identity
    assert json.loads((tmp_path / c.key / "identity.json").read_text())["dtype"] == "float32"
    with pytest.raises(ValueError, match=r"\[slots, grades\]"):
        c.put("x", np.zeros(3))


def test_hit_is_bit_identical_and_reads_nothing(tmp_path, tiny):
    cand = candidates(3)
    plain = scorer_of(tiny)
    score_dataset(cand, dataset="toy", run=ScoringRun.checked(V), protocol=Protocol.checked(PROTO), out_path=tmp_path / "plain.parquet", scorer=plain)
    cold = run(tiny, cand, tmp_path / "cold.parquet", tmp_path / "cache")
    warm = run(tiny, cand, tmp_path / "warm.parquet", tmp_path / "cache")
    ref = read_table(tmp_path / "plain.parquet", "scores")
    want = len(distinct_prompts(ref))
    assert plain.prompts_read == ref.select("perturbation", "presentation", "query_id", "prompt").unique().height
    assert cold.prompts_read == want and warm.prompts_read == 0
    # A hit is the stored read itself: the warm run equals the cold one bit for bit.
    assert pq.read_table(tmp_path / "warm.parquet").equals(pq.read_table(tmp_path / "cold.parquet"))
    # The cold run reads each distinct prompt once, so its batches (and padding) differ from
    # the uncached run's wherever a prompt repeats: equal up to float32 rounding.
    cold_df = read_table(tmp_path / "cold.parquet", "scores")
    assert cold_df.drop("score", "p0", "p1", "p2", "p3").equals(ref.drop("score", "p0", "p1", "p2", "p3"))
    np.testing.assert_allclose(cold_df["score"].to_numpy(), ref["score"].to_numpy(), rtol=0, atol=1e-5)
    meta = warm.job_profile
    assert (meta["cache_hits"], meta["cache_misses"], meta["cache_hit_rate"]) == (warm.prompts_asked, 0, 1.0)
    cm = cold.job_profile
    assert cm["cache_misses"] == want and cm["cache_hits"] == cold.prompts_asked - want
    # The counters stay out of the file: the warm job's is the cold one's, metadata and all.
    assert (tmp_path / "warm.parquet").read_bytes() == (tmp_path / "cold.parquet").read_bytes()
    # One shard per job after compaction, none left half-written.
    shards = sorted((tmp_path / "cache").glob("*/*.parquet"))
    assert len(shards) == 1 and not list((tmp_path / "cache").glob("*/.*"))


def test_a_corrupt_shard_is_quarantined_and_read_again(tmp_path, tiny, caplog):
    """One flipped bit in a stored probability (before the page checksum was taken, so only
    the entry checksum can tell) is never served: the shard goes to quarantine/, a warning
    names it, and the scorer reads those prompts again, giving the cold run's scores."""
    import logging

    import pyarrow as pa

    cand = candidates(3)
    cold = run(tiny, cand, tmp_path / "cold.parquet", tmp_path / "cache")
    (shard,) = (tmp_path / "cache").glob("*/*.parquet")
    table = pq.read_table(shard)
    probs = table.column("probs").combine_chunks()
    flat = probs.values.to_numpy().copy()
    flat.view("<u8")[5] ^= 1 << 51  # a mantissa bit of one probability
    table = table.set_column(table.schema.get_field_index("probs"), "probs",
                             pa.ListArray.from_arrays(probs.offsets, pa.array(flat)))
    pq.write_table(table, shard, write_page_checksum=True)
    caplog.set_level(logging.WARNING, logger="presdep.runtime.content_cache")
    again = run(tiny, cand, tmp_path / "again.parquet", tmp_path / "cache")
    assert again.prompts_read == cold.prompts_read > 0  # every entry of the shard was read again
    assert shard.name in caplog.text and "checksum mismatch" in caplog.text
    assert (shard.parent / "quarantine" / shard.name).exists()
    meta = again.job_profile
    assert (meta["cache_quarantined_shards"], meta["cache_quarantined_entries"]) == (1, table.num_rows)
    assert pq.read_table(tmp_path / "again.parquet").equals(pq.read_table(tmp_path / "cold.parquet"))
    warm = run(tiny, cand, tmp_path / "warm.parquet", tmp_path / "cache")  # the re-read entries were stored
    assert warm.prompts_read == 0 and warm.job_profile["cache_quarantined_shards"] == 0


def test_variants_share_reads(tmp_path, tiny):
    """Round-robin and BSC read only the prompts off the shelf did not (shuffles and, for BSC, the first-stage pass)."""
    cand = candidates(3)
    cache = tmp_path / "cache"
    run(tiny, cand, tmp_path / "ots.parquet", cache)
    seen = distinct_prompts(read_table(tmp_path / "ots.parquet", "scores"))
    for name, v in (("rr", {**V, "chunking": "round_robin"}), ("bsc", {**V, "bsc_k": 2, "bsc_ensembles": 2})):
        sc = run(tiny, cand, tmp_path / f"{name}.parquet", cache, variant=v)
        mine = distinct_prompts(read_table(tmp_path / f"{name}.parquet", "scores"))
        assert sc.prompts_read == len(mine - seen) > 0, name
        assert len(mine & seen) > 0
        seen |= mine


def test_growing_max_queries_reads_only_the_new_query(tmp_path, tiny):
    pool = candidates(6)
    ids = pool["query_id"].unique().to_list()
    three = query_subset(ids, 3, seed=4401, dataset="toy")
    four = query_subset(ids, 4, seed=4401, dataset="toy")
    (new,) = set(four) - set(three)
    cache = tmp_path / "cache"
    first = run(tiny, pool.filter(pl.col("query_id").is_in(three)), tmp_path / "a.parquet", cache)
    second = run(tiny, pool.filter(pl.col("query_id").is_in(four)), tmp_path / "b.parquet", cache)
    b = read_table(tmp_path / "b.parquet", "scores")
    assert first.prompts_read == len(distinct_prompts(read_table(tmp_path / "a.parquet", "scores")))
    assert second.prompts_read == len(distinct_prompts(b, {new})) > 0
    # The three old queries' rows are the first run's, bit for bit.
    a = read_table(tmp_path / "a.parquet", "scores")
    assert b.filter(pl.col("query_id") != new).equals(a)


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    from presdep.scoring.read_cache import ReadCache

    root, go, who, rounds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    while not go.exists():
        time.sleep(0.001)
    for r in range(rounds):
        c = ReadCache(root, {"model": {"test": "race"}})
        c.put(f"shared-{r}", np.full((2, 4), 0.25) + np.array([[1, -1, 2, -2], [3, -3, 0, 0]]) * 1e-3 * r)
        c.flush()
        if who == "b" and r % 2:  # entries of its own, in shards of their own
            c.put(f"own-{who}-{r}", np.full((1, 4), 0.25))
            c.flush()
    """
)


def test_two_processes_writing_the_same_entry_leave_one_valid_entry(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    go, root, rounds = tmp_path / "go", tmp_path / "cache", 30
    procs = [subprocess.Popen([sys.executable, str(script), str(root), str(go), w, str(rounds)]) for w in "ab"]
    time.sleep(1.0)  # both interpreters up and polling
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    (ident,) = [d for d in root.iterdir() if d.is_dir()]
    assert not [p for p in ident.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    rows = pl.concat([pl.read_parquet(p) for p in ident.glob("*.parquet")])
    keys = rows["key"].to_list()
    # Every entry is present, and two processes writing the same entry left one shard, one row.
    want = {f"shared-{r}" for r in range(rounds)} | {f"own-b-{r}" for r in range(1, rounds, 2)}
    assert set(keys) == want
    assert rows.filter(pl.col("key").str.starts_with("shared")).height == rounds
    c = ReadCache(root, {"model": {"test": "race"}})
    for r in range(rounds):
        want_p = np.full((2, 4), 0.25) + np.array([[1, -1, 2, -2], [3, -3, 0, 0]]) * 1e-3 * r  # rows sum to 1
        assert c.get(f"shared-{r}").tobytes() == want_p.tobytes()


KILLED = textwrap.dedent(
    """
    import sys, time
    import polars as pl
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from presdep.scoring.backends import TransformersScorer
    from presdep.config.records import Protocol, ScoringRun
    from presdep.scoring import run
    from presdep.scoring.run import score_dataset

    run.CROSS_QUERY_PROMPTS = 1  # one query per read call: a kill can fall between finished queries
    model_dir, cand, out, cache, delay = sys.argv[1:6]

    class Slow(TransformersScorer):
        def read_built(self, built):
            time.sleep(float(delay))
            return super().read_built(built)

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sc = Slow(model, AutoTokenizer.from_pretrained(model_dir), max_doc_chars=60, batch_size=2,
              model_identity={"test": "killed"})
    v = {"scorer": "transformers", "chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 2}
    proto = {"seed": 7, "M": 2, "B": 2, "perturbations": ["random_shuffle"], "max_doc_chars": 60}
    score_dataset(pl.read_parquet(cand), dataset="toy", run=ScoringRun.checked(v), protocol=Protocol.checked(proto), out_path=out, scorer=sc,
                  read_cache=cache)
    print(sc.prompts_read)
    """
)


def test_a_killed_job_repeats_no_read(tmp_path, tiny):
    model, tok = tiny
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    cand = candidates(4)
    cpath = tmp_path / "cand.parquet"
    cand.write_parquet(cpath)
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    cache, out = tmp_path / "cache", tmp_path / "out.parquet"
    proc = subprocess.Popen([sys.executable, str(script), str(model_dir), str(cpath), str(out), str(cache), "0.3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    finished = tmp_path / "out.parquet.partial"
    while time.time() < deadline and (len(list(cache.glob("*/*.parquet"))) < 3 or not list(finished.glob("q-*"))):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 1 <= len(list(finished.glob("q-*.arrow"))) < 4, "the kill came after every query or before the first"
    (ident,) = [d for d in cache.iterdir() if d.is_dir()]
    stored = pl.concat([pl.read_parquet(p) for p in ident.glob("*.parquet")])["key"].n_unique()
    assert stored >= 3 * 2 and not out.exists()
    res = subprocess.run([sys.executable, str(script), str(model_dir), str(cpath), str(out), str(cache), "0"],
                         check=True, capture_output=True, text=True)
    total = len(distinct_prompts(read_table(out, "scores")))
    assert stored < total
    assert int(res.stdout.strip().splitlines()[-1]) == total - stored
    # The killed run's parts are gone, and the reads of the queries it finished (not asked for
    # again: the journal in its resume folder names them) are in the job's one shard, which is
    # the shard an uninterrupted run leaves, byte for byte (the resumed job's batches are the
    # rest of the uninterrupted job's: each query's prompts are cut longest first).
    whole = tmp_path / "whole-cache"
    subprocess.run([sys.executable, str(script), str(model_dir), str(cpath), str(tmp_path / "whole.parquet"),
                    str(whole), "0"], check=True, capture_output=True, text=True)
    (shard,) = ident.glob("*.parquet")
    assert shard.read_bytes() == (whole / ident.name / shard.name).read_bytes()
    assert pq.read_table(out).equals(pq.read_table(tmp_path / "whole.parquet"))  # (the caches' folders differ)


def test_one_prompt_per_pass_makes_scores_independent_of_the_cache(tmp_path, tiny):
    """batch_size 1 (the CPU default's): no padding and no batch neighbours, so a variant's
    scores are the same bits whether its prompts were read by it or by another variant."""
    cand = candidates(3)
    rr = {**V, "chunking": "round_robin"}
    for name, v in (("ots", V), ("rr", rr)):
        sc = scorer_of(tiny, batch_size=1)
        score_dataset(cand, dataset="toy", run=ScoringRun.checked(v), protocol=Protocol.checked(PROTO), out_path=tmp_path / f"plain-{name}.parquet",
                      scorer=sc)
    run(tiny, cand, tmp_path / "ots.parquet", tmp_path / "cache", batch_size=1)
    rr_job = run(tiny, cand, tmp_path / "rr.parquet", tmp_path / "cache", variant=rr, batch_size=1)
    assert rr_job.job_profile["cache_hits"] > 0
    for name in ("ots", "rr"):
        assert pq.read_table(tmp_path / f"{name}.parquet").equals(pq.read_table(tmp_path / f"plain-{name}.parquet"))


def test_weights_load_only_on_a_cache_miss(tmp_path, tiny):
    """A job whose prompts were all read before never loads the model; a miss loads it once."""
    from presdep.scoring.backends import TransformersScorer

    model, tok = tiny
    cand = candidates(2)
    run(tiny, cand, tmp_path / "cold.parquet", tmp_path / "cache")
    loads = []

    def lazy(cand, out):
        sc = TransformersScorer(None, tok, model_loader=lambda: loads.append(1) or model, device="cpu",
                                dtype=torch.float32, max_doc_chars=60, batch_size=3, model_identity=IDENT["model"])
        prof = score_dataset(cand, dataset="toy", run=ScoringRun.checked(V), protocol=Protocol.checked(PROTO), out_path=out, scorer=sc,
                             read_cache=tmp_path / "cache")
        return sc, prof

    warm, prof = lazy(cand, tmp_path / "warm.parquet")
    assert loads == [] and not warm.model_loaded and prof["model_loaded"] is False
    assert pq.read_table(tmp_path / "warm.parquet").equals(pq.read_table(tmp_path / "cold.parquet"))
    # The metadata names the same dtype and device without the weights being loaded.
    assert read_metadata(tmp_path / "warm.parquet")["scorer"]["dtype"] == "float32"
    grown, prof = lazy(candidates(3), tmp_path / "grown.parquet")
    assert loads == [1] and grown.model_loaded and prof["model_loaded"] is True and grown.prompts_read > 0
