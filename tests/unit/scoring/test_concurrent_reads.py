"""One read per distinct prompt, also across concurrent jobs: claims in the read cache.

Two real processes scoring overlapping prompt sets through one cache folder read every
distinct prompt once between them, and each gets a single-process run's scores bit for bit;
a claim left by a dead process, by a silent host or by a job that failed never blocks; a
live claimer's heartbeat keeps its claims; a waiter's patience has a bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from scorers_tiny import saved_tiny_llama

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.schemas import read_table
from presdep.runtime import content_cache
from presdep.runtime.content_cache import CLAIMS_DIR
from presdep.scoring.read_cache import ReadCache
from presdep.scoring.run import score_dataset

OTS = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 2, "capcal_beta": 1.0,
       "scorer": "transformers"}
BSC = {**OTS, "bsc_k": 2, "bsc_ensembles": 2}  # shuffles 0..3: its 0 and 1 are the off-the-shelf variant's
PROTO = {"seed": 7, "M": 2, "B": 2, "perturbations": ["random_shuffle"], "max_doc_chars": 60}
IDENT = {"test": "tiny-llama-concurrent"}
WORDS = "water boils lower altitude pressure kettle steam mountain sea level degrees cooking".split()


def candidates(queries) -> pl.DataFrame:
    rows = []
    for q in queries:
        for r in range(1, 6):
            doc = " ".join(WORDS[(q * 3 + r * k) % len(WORDS)] for k in range(1, 6))
            rows.append((f"q{q}", f"question number {q}", f"q{q}d{r}", f"{doc} {q}-{r}", r, 1.0 / r))
    return pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"],
                        orient="row").with_columns(pl.col("first_stage_rank").cast(pl.Int32))


def distinct_prompts(df: pl.DataFrame) -> set[tuple[str, tuple[str, ...]]]:
    """The oracle's count of model work: distinct (query, doc ids in slot order) prompts of a scores table."""
    out = set()
    for (qid, *_), g in df.group_by("query_id", "perturbation", "presentation", "prompt"):
        out.add((qid, tuple(g.sort("slot")["doc_id"].to_list())))
    return out


@pytest.fixture(scope="module")
def model_dir(smollm2_model_dir, tmp_path_factory):
    """A tiny random Llama with the real SmolLM2 tokenizer (grade tokens 32..35), saved for subprocesses."""
    return saved_tiny_llama(smollm2_model_dir, tmp_path_factory.mktemp("tiny-llama"))


def scorer_of(model_dir, batch_size=1):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from presdep.scoring.backends import TransformersScorer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return TransformersScorer(model, AutoTokenizer.from_pretrained(model_dir), max_doc_chars=60,
                              batch_size=batch_size, model_identity=IDENT)


def score(sc, cand, variant, out, cache):
    return score_dataset(cand, dataset="toy", run=ScoringRun.checked(variant), protocol=Protocol.checked(PROTO),
                         out_path=out, scorer=sc, read_cache=cache)


JOB = textwrap.dedent(
    """
    import json, sys, time
    import polars as pl
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from presdep.config.records import Protocol, ScoringRun
    from presdep.scoring.backends import TransformersScorer
    from presdep.scoring.run import score_dataset

    model_dir, cand, variant, proto, out, cache, go, delay, batch_size = sys.argv[1:10]

    class Slow(TransformersScorer):
        def read_built(self, built):
            time.sleep(float(delay))  # a read slow enough for two jobs to overlap
            return super().read_built(built)

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sc = Slow(model, AutoTokenizer.from_pretrained(model_dir), max_doc_chars=60, batch_size=int(batch_size),
              model_identity=IDENT)
    while not __import__("os").path.exists(go):
        time.sleep(0.005)
    prof = score_dataset(pl.read_parquet(cand), dataset="toy", run=ScoringRun.checked(json.loads(variant)),
                         protocol=Protocol.checked(json.loads(proto)), out_path=out, scorer=sc, read_cache=cache)
    print(json.dumps(prof))
    """
).replace("IDENT", repr(IDENT))


def test_two_concurrent_jobs_read_each_shared_prompt_once(tmp_path, model_dir):
    """Off the shelf on q0..q2 and BSC on q1..q3 (whose shuffles 0 and 1 are the same prompts)
    at once, through one cache folder: the reads of both sum to the distinct prompts, each job
    waited for some of the other's, and each job's scores are a single-process run's, bit for bit."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    cache, go = tmp_path / "cache", tmp_path / "go"
    jobs = {"ots": (OTS, [0, 1, 2]), "bsc": (BSC, [1, 2, 3])}
    procs = {}
    for name, (variant, queries) in jobs.items():
        cpath = tmp_path / f"{name}-cand.parquet"
        candidates(queries).write_parquet(cpath)
        procs[name] = subprocess.Popen(
            [sys.executable, str(script), str(model_dir), str(cpath), json.dumps(variant), json.dumps(PROTO),
             str(tmp_path / f"{name}.parquet"), str(cache), str(go), "0.2", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    go.touch()  # both start scoring together (each polls for this file once its model is loaded)
    prof = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        prof[name] = json.loads(out.strip().splitlines()[-1])
    mine = {name: distinct_prompts(read_table(tmp_path / f"{name}.parquet", "scores")) for name in jobs}
    union = mine["ots"] | mine["bsc"]
    assert len(mine["ots"] & mine["bsc"]) > 0 and len(union) < len(mine["ots"]) + len(mine["bsc"])
    assert sum(p["reads"] for p in prof.values()) == len(union)  # one read per distinct prompt, over both jobs
    for name, p in prof.items():
        assert p["distinct_prompts"] == len(mine[name]), name
        # Every prompt this job missed in the cache was read either by it or by the other job.
        assert p["cache_misses"] == p["reads"] + p["waited_for_other_job"], (name, p)
        assert p["claims_taken_over"] == 0, name
    assert sum(p["waited_for_other_job"] for p in prof.values()) > 0  # the jobs did overlap
    assert not list((next(cache.iterdir()) / CLAIMS_DIR).iterdir())  # every claim released
    # Bit for bit a single-process run's (batch size 1: a read does not depend on its batch).
    for name, (variant, queries) in jobs.items():
        ref = tmp_path / f"{name}-alone.parquet"
        score(scorer_of(model_dir), candidates(queries), variant, ref, tmp_path / f"cache-{name}-alone")
        assert pq.read_table(tmp_path / f"{name}.parquet").equals(pq.read_table(ref)), name


def _claim_file(cache: ReadCache, key: str, **fields) -> None:
    info = {"key": key, **content_cache._HOST, "pid": os.getpid(), "pid_start": None, "time": time.time(),
            "token": "someone-else", **fields}
    cache.claims_dir.mkdir(exist_ok=True)
    cache.claim_path(key).write_text(json.dumps(info))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_claim_left_by_a_dead_job_is_taken_over_at_once(tmp_path, model_dir, monkeypatch):
    """Claims on every prompt of a job, left by a process that died on this host a moment ago
    (fresh mtimes), are taken over without waiting: no timeout is involved."""
    monkeypatch.setattr(content_cache, "CLAIM_STALE_S", 1e6)
    monkeypatch.setattr(content_cache, "CLAIM_WAIT_S", 1e6)
    cand = candidates([0, 1])
    score(scorer_of(model_dir), cand, OTS, tmp_path / "ref.parquet", tmp_path / "ref-cache")
    (ref_ident,) = list((tmp_path / "ref-cache").iterdir())
    keys = pl.concat([pl.read_parquet(p) for p in ref_ident.glob("*.parquet")])["key"].to_list()
    dead = _dead_pid()
    # A job starting now sweeps such claims away ...
    swept = ReadCache(tmp_path / "cache", scorer_of(model_dir).cache_identity())
    assert swept.key == ref_ident.name
    for k in keys:
        _claim_file(swept, k, pid=dead)
    assert ReadCache(tmp_path / "cache", swept.identity).claims_dir == swept.claims_dir
    assert not list(swept.claims_dir.glob("*.claim"))
    # ... and takes over those left after it started (the other job died while this one ran).
    from presdep.scoring import read_through

    class ClaimedAfterStart(ReadCache):  # the run's cache, with the dead job's claims planted once opened
        def __init__(self, root, identity):
            super().__init__(root, identity)
            for k in keys:
                _claim_file(self, k, pid=dead)

    monkeypatch.setattr(read_through, "ReadCache", ClaimedAfterStart)
    sc = scorer_of(model_dir)
    t0 = time.monotonic()
    prof = score(sc, cand, OTS, tmp_path / "out.parquet", tmp_path / "cache")
    assert time.monotonic() - t0 < 60
    assert prof["reads"] == len(keys) and prof["claims_taken_over"] == len(keys) and prof["waited_for_other_job"] == 0
    assert not list(swept.claims_dir.glob("*")) and not list(swept.claims_dir.glob(".*"))
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(tmp_path / "ref.parquet"))


def test_stale_claims_are_judged_by_pid_age_and_watching(tmp_path, monkeypatch):
    monkeypatch.setattr(content_cache, "CLAIM_STALE_S", 0.5)
    c = ReadCache(tmp_path, IDENT)
    # Another host's claim untouched for longer than CLAIM_STALE_S: taken over.
    _claim_file(c, "old", host="elsewhere", pid=1)
    os.utime(c.claim_path("old"), (time.time() - 10, time.time() - 10))
    # A claim this process made but no cache object holds any more (a crash inside a job).
    _claim_file(c, "mine-lost")
    # A live process on this host whose pid now names another process (its start time differs).
    _claim_file(c, "reused", pid=os.getppid(), pid_start=-1)
    # A fresh claim of another host: live until watched unchanged for CLAIM_STALE_S.
    _claim_file(c, "fresh", host="elsewhere", pid=1)
    mine, stored, theirs = c.claim(["old", "mine-lost", "reused", "fresh"])
    assert (sorted(mine), stored, theirs) == (["mine-lost", "old", "reused"], {}, ["fresh"])
    assert c.claims_taken_over == 3
    t0 = time.monotonic()
    got, mine = c.await_claimed(["fresh"])
    assert (got, mine) == ({}, ["fresh"]) and 0.4 <= time.monotonic() - t0 < 10
    assert json.loads(c.claim_path("fresh").read_text())["pid"] == os.getpid()
    c.release(["old", "mine-lost", "reused", "fresh"])
    assert not list(c.claims_dir.iterdir())


def test_a_live_claim_is_waited_for_and_a_heartbeat_keeps_it(tmp_path, monkeypatch):
    """A claimer that keeps touching its claim is never taken over, however long it reads; the
    waiter gets the stored value once the claim goes, and counts it."""
    monkeypatch.setattr(content_cache, "CLAIM_STALE_S", 0.4)
    monkeypatch.setattr(content_cache, "CLAIM_HEARTBEAT_S", 0.05)
    a, b = ReadCache(tmp_path, IDENT), ReadCache(tmp_path, IDENT)
    assert a.claim(["k"]) == (["k"], {}, [])
    assert b.claim(["k"]) == ([], {}, ["k"])
    value = np.full((2, 4), 0.25)

    import threading

    def finish():
        time.sleep(1.2)  # three times CLAIM_STALE_S
        a.put("k", value)
        a.flush()
        a.release(["k"])

    t = threading.Thread(target=finish)
    t.start()
    got, mine = b.await_claimed(["k"])
    t.join()
    assert mine == [] and got["k"].tobytes() == value.tobytes()
    assert b.claims_waited == 1 and b.claims_taken_over == 0 and not list(a.claims_dir.iterdir())


def test_a_claim_released_without_a_value_or_held_too_long_is_computed_by_the_waiter(tmp_path, monkeypatch):
    monkeypatch.setattr(content_cache, "CLAIM_HEARTBEAT_S", 0.05)
    a, b = ReadCache(tmp_path, IDENT), ReadCache(tmp_path, IDENT)
    a.claim(["failed", "slow"])
    assert b.claim(["failed", "slow"])[2] == ["failed", "slow"]
    a.release(["failed"])  # its claimer gave up (an error while reading): nothing stored
    got, mine = b.await_claimed(["failed", "slow"])
    assert (got, mine) == ({}, ["failed"]) and b.claims_taken_over == 0
    monkeypatch.setattr(content_cache, "CLAIM_WAIT_S", 0.3)  # a live claimer that never finishes
    t0 = time.monotonic()
    assert b.await_claimed(["slow"]) == ({}, ["slow"]) and time.monotonic() - t0 >= 0.3
    a.release(["slow"])  # the old claimer's release leaves the new claim alone
    assert b.claim_path("slow").exists() and b.held_claims() == ["failed", "slow"]
    b.release_all()
    assert not list(b.claims_dir.iterdir())


HOLDER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from presdep.scoring.read_cache import ReadCache

    root, ready, mode = sys.argv[1:4]
    c = ReadCache(root, IDENT)
    assert c.claim(["k"])[0] == ["k"]
    open(ready, "w").close()
    time.sleep(1.0)
    if mode == "store":
        c.put("k", np.full((1, 4), 0.25))
        c.flush()
        c.release(["k"])
    else:
        time.sleep(1e6)  # killed while holding the claim
    """
).replace("IDENT", repr(IDENT))


@pytest.mark.parametrize("mode", ["store", "killed"])
def test_another_process_claim_stored_or_killed(tmp_path, mode):
    """Across processes: a waiter gets the claimer's stored value, or takes the claim over as
    soon as the claimer is killed (no timeout)."""
    script, ready = tmp_path / "holder.py", tmp_path / "ready"
    script.write_text(HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "cache"), str(ready), mode])
    try:
        deadline = time.time() + 120
        while not ready.exists():
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.01)
        c = ReadCache(tmp_path / "cache", IDENT)
        assert c.claim(["k"]) == ([], {}, ["k"])
        if mode == "killed":
            proc.kill()
            proc.wait()
        got, mine = c.await_claimed(["k"])
        if mode == "store":
            assert mine == [] and got["k"].tobytes() == np.full((1, 4), 0.25).tobytes() and c.claims_waited == 1
        else:
            assert got == {} and mine == ["k"] and c.claims_taken_over == 1
            c.release(mine)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode is not None
