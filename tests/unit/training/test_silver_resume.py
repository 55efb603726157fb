"""Silver labels resume after a kill -9: batch files, the fingerprint, the length-sorted batch plan.

The job under test is tests/silver_resume_job.py (a hash-derived scorer, or the open-weight
readout of a tiny random model), killed while the teacher reads one batch.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import silver_resume_job as sj

from presdep.config.records import Protocol, Teacher
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.runtime.resume import partial_dir
from presdep.training import silver_partial as sp
from presdep.training.silver import silver_batches, silver_labels, silver_labels_files, silver_prompts

SCRIPT = Path(sj.__file__)


def _plan(kind: str, cand: Path, model_dir: Path | None = None, **overrides):
    """The job's batch plan: in characters for the hash teacher, in prompt tokens for the tiny model."""
    s = {**sj.SETTINGS[kind], **overrides}
    _, prompts = silver_prompts(read_table(cand, "candidates"), dataset="ds", T=s["T"], B=s["B"], seed=s["seed"],
                                max_doc_chars=s["max_doc_chars"])
    tokens = None
    if model_dir is not None:
        teacher = sj.tiny_teacher(model_dir, s)

        def tokens(q, d):
            return len(teacher.build(q, list(d)).ids)
    return silver_batches(prompts, batch_prompts=s["batch_prompts"], batch_chars=s["batch_chars"],
                          prompt_tokens=tokens, batch_tokens=s.get("batch_tokens", sp.BATCH_TOKENS)), len(prompts)


def _kill_in_batch(tmp_path: Path, cand: Path, out: Path, kind: str, stop_at: int, *extra: str) -> None:
    """Run the job in a subprocess; SIGKILL it while the teacher is asked for batch ``stop_at``."""
    marker = tmp_path / f"marker-{kind}"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(cand), str(out), kind, str(stop_at), str(marker), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"the job ended (rc {proc.returncode}) before batch {stop_at}: {proc.stderr.read()[-3000:]}")
        if time.time() > deadline:
            proc.kill()
            pytest.fail(f"the job never reached batch {stop_at}")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def _check_flushed(out: Path, ref: pl.DataFrame, n_flushed: int) -> Path:
    """The partial folder holds batches 0..n_flushed-1, each with the reference run's scores."""
    partial = partial_dir(out)
    assert not out.exists(), "a killed job wrote its final output"
    names = sorted(p.name for p in partial.glob("b-*.arrow"))
    assert names == [sp.batch_path(partial, k).name for k in range(n_flushed)]
    assert (partial / "fingerprint.json").exists()
    for name in names:
        got = pl.read_ipc(partial / name)
        want = got.drop("score").join(ref.select("query_id", "doc_id", "presentation", "score"),
                                      on=["query_id", "doc_id", "presentation"], how="left")
        assert got.height > 0 and got["score"].to_list() == want["score"].to_list()
    return partial


def test_kill_9_then_resume_rereads_only_unflushed_batches_and_writes_identical_bytes(tmp_path):
    cand = sj.write_candidates(tmp_path / "c.parquet", "hash")
    plan, n_prompts = _plan("hash", cand)
    ref_out = tmp_path / "ref" / "s.parquet"
    ref, ref_run = sj.job(cand, ref_out, "hash")
    assert ref_run.calls == len(plan) >= 8 and ref_run.prompts == n_prompts == 6 * 3 * 3
    assert not (tmp_path / "ref" / "s.parquet.partial").exists()

    out = tmp_path / "run" / "s.parquet"
    stop_at = 12  # killed while batch 12 is read: batches 0..11 are flushed
    _kill_in_batch(tmp_path, cand, out, "hash", stop_at)
    partial = _check_flushed(out, ref, stop_at)

    res = subprocess.run([sys.executable, str(SCRIPT), str(cand), str(out), "hash", "-1", "-"],
                         check=True, capture_output=True, text=True)
    counts = json.loads(res.stdout.strip().splitlines()[-1])
    flushed = sum(len(plan[k]) for k in range(stop_at))
    # Only the batches not yet flushed were read again (the one in flight included).
    assert counts == {"calls": len(plan) - stop_at, "prompts": n_prompts - flushed}
    assert f"{stop_at} of {len(plan)} batches ({flushed} of {n_prompts} prompts) already read" in res.stderr
    assert not partial.exists(), "the partial folder outlived the finished job"
    assert out.read_bytes() == ref_out.read_bytes()
    assert read_table(out, "silver").equals(ref)


def test_kill_9_of_the_open_weight_teacher_on_a_tiny_model(tmp_path):
    from scorers_tiny import tiny_causal_lm

    model = tiny_causal_lm(tmp_path / "model", seed=4)
    cand = sj.write_candidates(tmp_path / "c.parquet", "tiny")
    plan, n_prompts = _plan("tiny", cand, model)
    assert len(plan) >= 3
    chars, _ = _plan("tiny", cand)
    assert plan != chars  # sized and ordered by the teacher's tokens, not by characters
    ref_out = tmp_path / "ref" / "s.parquet"
    ref, _ = sj.job(cand, ref_out, "tiny", model_dir=model)
    assert ref["score"].null_count() == 0 and ref["score"].is_between(0.0, 3.0).all()

    out = tmp_path / "run" / "s.parquet"
    _kill_in_batch(tmp_path, cand, out, "tiny", 1, str(model))
    _check_flushed(out, ref, 1)
    df, resumed = sj.job(cand, out, "tiny", model_dir=model)  # the re-run, in this process
    assert resumed.calls == len(plan) - 1 and resumed.prompts == n_prompts - len(plan[0])
    assert out.read_bytes() == ref_out.read_bytes() and df.equals(ref)
    assert read_metadata(out)["readout"]["scorer"] == "transformers"


@pytest.mark.parametrize("change", [{"seed": 6}, {"T": 2}, {"batch_prompts": 3}, {"max_doc_chars": 60}])
def test_partial_folder_of_other_settings_is_discarded(tmp_path, caplog, change):
    cand = sj.write_candidates(tmp_path / "c.parquet", "hash")
    out = tmp_path / "run" / "s.parquet"
    df, _ = sj.job(cand, out, "hash", stop_at=2, block=False)
    assert df is None and len(list((tmp_path / "run" / "s.parquet.partial").glob("b-*.arrow"))) == 2
    plan, n_prompts = _plan("hash", cand, **change)
    caplog.set_level(logging.INFO)
    df, rerun = sj.job(cand, out, "hash", **change)
    assert "discarding work of a run with other inputs or settings" in caplog.text
    assert "already read" not in caplog.text
    assert rerun.calls == len(plan) and rerun.prompts == n_prompts  # nothing reused
    fresh_out = tmp_path / "fresh" / "s.parquet"
    fresh, _ = sj.job(cand, fresh_out, "hash", **change)
    assert out.read_bytes() == fresh_out.read_bytes() and df.equals(fresh)


def test_other_candidates_discard_the_partial_folder(tmp_path, caplog):
    cand = sj.write_candidates(tmp_path / "c.parquet", "hash")
    out = tmp_path / "s.parquet"
    sj.job(cand, out, "hash", stop_at=2, block=False)
    other = read_table(cand, "candidates").with_columns(
        pl.when(pl.col("doc_id") == "q0-d0").then(pl.lit("a changed text")).otherwise(pl.col("doc")).alias("doc"))
    write_table(other, cand, "candidates")
    caplog.set_level(logging.INFO)
    _, rerun = sj.job(cand, out, "hash")
    assert "discarding work" in caplog.text and rerun.calls == len(_plan("hash", cand)[0])


@pytest.mark.parametrize("damage", ["other batch's files", "not arrow", "no record", "record not json",
                                    "record edited"])
def test_a_damaged_batch_under_a_matching_fingerprint_is_discarded_by_name_and_read_again(tmp_path, caplog, damage):
    cand = sj.write_candidates(tmp_path / "c.parquet", "hash")
    fresh_out = tmp_path / "fresh" / "s.parquet"
    sj.job(cand, fresh_out, "hash")
    out = tmp_path / "s.parquet"
    sj.job(cand, out, "hash", stop_at=2, block=False)
    partial = tmp_path / "s.parquet.partial"
    b1, r1 = sp.batch_path(partial, 1), sp.record_path(partial, 1)
    if damage == "other batch's files":  # batch 0's rows and record under batch 1's names
        shutil.copy(sp.batch_path(partial, 0), b1)
        shutil.copy(sp.record_path(partial, 0), r1)
    elif damage == "not arrow":
        b1.write_bytes(b"not arrow")
    elif damage == "no record":
        r1.unlink()
    elif damage == "record not json":
        r1.write_bytes(b"\xff{")
    else:
        r1.write_text(r1.read_text().replace('"stats": null', '"stats": {"prompts": 1}'))
    caplog.set_level(logging.INFO)
    df, rerun = sj.job(cand, out, "hash")
    assert f"{b1}: " in caplog.text and "discarded, its prompts are read again" in caplog.text
    assert rerun.calls == len(_plan("hash", cand)[0]) - 1  # batch 0 kept, batch 1 read again
    assert out.read_bytes() == fresh_out.read_bytes()


def test_resumed_hosted_teacher_sums_the_usage_of_every_batch(tmp_path, monkeypatch):
    from fault_server import hosted_spec

    from presdep.training import hosted

    cand = sj.write_candidates(tmp_path / "c.parquet", "hash")
    teacher = Teacher.checked("mock", {"kind": "hosted", "T": 2, **hosted_spec(None, provider="mock", model="g")})
    proto = Protocol.checked({"M": 1, "perturbations": [], "B": 3, "seed": 5, "max_doc_chars": 80})

    def run(root: Path, **kw):
        return silver_labels_files(candidates_path=cand, out_path=root / "s.parquet", teacher=teacher, dataset="ds",
                                   protocol=proto, cache_dir=root / "cache", batch_prompts=4, batch_chars=400, **kw)

    fresh = run(tmp_path / "fresh")
    real, calls = hosted.HostedGrader.grade_many, []

    def stop_in_third(self, prompts, desc="hosted"):
        calls.append(len(prompts))
        if len(calls) == 3:
            raise sj.Interrupted("stopped")
        return real(self, prompts, desc)

    monkeypatch.setattr(hosted.HostedGrader, "grade_many", stop_in_third)
    with pytest.raises(sj.Interrupted):
        run(tmp_path / "run")
    monkeypatch.setattr(hosted.HostedGrader, "grade_many", real)
    df = run(tmp_path / "run")
    assert df.equals(fresh)
    a, b = read_metadata(tmp_path / "run" / "s.parquet"), read_metadata(tmp_path / "fresh" / "s.parquet")
    assert a["usage"]["prompts"] == b["usage"]["prompts"] == 6 * 2 * 3
    assert a["usage"]["requests"] == b["usage"]["requests"]  # the two flushed batches' requests are counted
    assert {k: v for k, v in a.items() if k != "usage"} == {k: v for k, v in b.items() if k != "usage"}


def test_batch_plan_covers_every_prompt_once_within_the_budget_and_is_deterministic():
    rng = random.Random(3)
    lengths = [rng.randint(1, 300) for _ in range(500)] + [5000, 0, 7, 7, 7]
    plan = sp.plan_batches(lengths, max_prompts=16, max_chars=1000)
    flat = [i for b in plan for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every prompt in exactly one batch
    for b in plan:
        assert 1 <= len(b) <= 16 and b == sorted(b)
        assert sum(lengths[i] for i in b) <= 1000 or len(b) == 1  # a prompt over the budget goes alone
    assert [len(b) for b in plan if 5000 in (lengths[i] for i in b)] == [1] and lengths[plan[0][0]] == 5000
    # longest first: every batch's prompts are at least as long as the next batch's
    for a, b in itertools.pairwise(plan):
        assert min(lengths[i] for i in a) >= max(lengths[i] for i in b)
    assert sp.plan_batches(list(lengths), max_prompts=16, max_chars=1000) == plan
    assert sp.plan_batches([], max_prompts=4, max_chars=10) == []
    with pytest.raises(InvalidInput, match="max_prompts=0"):
        sp.plan_batches(lengths, max_prompts=0, max_chars=10)


def test_batched_results_map_back_to_the_prompts_own_order(tmp_path):
    cand = read_table(sj.write_candidates(tmp_path / "c.parquet", "hash"), "candidates")
    s = sj.SETTINGS["hash"]
    kw = {"dataset": "ds", "T": s["T"], "B": s["B"], "seed": s["seed"], "max_doc_chars": s["max_doc_chars"]}
    layout, prompts = silver_prompts(cand, **kw)
    kw["teacher"] = "t"
    plan = silver_batches(prompts, batch_prompts=4, batch_chars=400)
    assert [i for b in plan for i in b] != list(range(len(prompts)))  # the plan does reorder
    for b in plan:
        assert len(b) <= 4 and (sum(sp.prompt_chars(*prompts[i]) for i in b) <= 400 or len(b) == 1)
    scorer = sj.Counting(sj.HashScorer())
    batched = silver_labels(cand, lambda p: [[r.score for r in ro] for ro in scorer.score_prompts(p)],
                            batch_prompts=4, batch_chars=400, **kw)
    assert scorer.batches == [[prompts[i] for i in b] for b in plan]  # the teacher read the planned batches
    one = silver_labels(cand, lambda p: [[r.score for r in ro] for ro in sj.HashScorer().score_prompts(p)],
                        batch_prompts=1, **kw)
    assert batched.equals(one)
    # against each prompt scored on its own, in the layout's (query, shuffle, slot) order
    for (qid, t, ids), (q, docs) in zip(layout, prompts):
        direct = [r.score for r in sj.HashScorer().score_prompts([(q, docs)])[0]]
        got = batched.filter((pl.col("query_id") == qid) & (pl.col("presentation") == t))
        by_doc = dict(zip(got["doc_id"].to_list(), got["score"].to_list()))
        assert [by_doc[d] for d in ids] == direct
