"""Silver labels resume only onto the same teacher and whole batch files.

The teacher is named by the content of its files (a model replaced at the same path discards
the resume folder), and every batch file is checked against the sha256 in its record, so a
flipped byte is read again by the teacher, never a changed label nor a crash.
The job under test is tests/silver_resume_job.py.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import polars as pl
import pytest
import silver_resume_job as sj

from presdep.runtime import model_digest
from presdep.training import silver_partial as sp
from presdep.training.silver import TEACHER_MEMO

N_FLIPS = 300


def _flips(data: bytes, n: int = N_FLIPS):
    """``n`` copies of ``data``, each with one byte changed, at positions spread over the file."""
    for i in range(n):
        pos = i * len(data) // n
        flipped = bytearray(data)
        flipped[pos] ^= 1 + (37 * i) % 255  # never 0: the byte does change
        yield pos, bytes(flipped)


def _interrupted(tmp_path: Path, stop_at: int = 3) -> tuple[Path, Path, int]:
    """(candidates, partial folder of a hash job stopped in batch ``stop_at``, the job's batch count);
    the clean output is ``clean/s.parquet``."""
    cand = sj.write_candidates(tmp_path / "c.parquet", "hash")
    _, clean_run = sj.job(cand, tmp_path / "clean" / "s.parquet", "hash")
    sj.job(cand, tmp_path / "run" / "s.parquet", "hash", stop_at=stop_at, block=False)
    return cand, tmp_path / "run" / "s.parquet.partial", clean_run.calls


def test_a_teacher_replaced_at_the_same_path_rereads_every_batch(tmp_path, caplog):
    from scorers_tiny import tiny_causal_lm

    model = tiny_causal_lm(tmp_path / "model", seed=4)
    cand = sj.write_candidates(tmp_path / "c.parquet", "tiny")
    old, _ = sj.job(cand, tmp_path / "old" / "s.parquet", "tiny", model_dir=model)
    out = tmp_path / "run" / "s.parquet"
    df, _ = sj.job(cand, out, "tiny", model_dir=model, stop_at=2, block=False)
    assert df is None and len(list((tmp_path / "run" / "s.parquet.partial").glob("b-*.arrow"))) == 2

    # Another random model's weights written over the old ones: same path, same names, same size.
    weights = model / "model.safetensors"
    other = tiny_causal_lm(tmp_path / "other", seed=9) / "model.safetensors"
    assert other.stat().st_size == weights.stat().st_size
    shutil.copyfile(other, weights)
    caplog.set_level(logging.INFO)
    df, resumed = sj.job(cand, out, "tiny", model_dir=model)
    assert "another teacher" in caplog.text and "already read" not in caplog.text

    fresh_out = tmp_path / "fresh" / "s.parquet"
    fresh, fresh_run = sj.job(cand, fresh_out, "tiny", model_dir=model)
    assert not fresh.equals(old)  # the two models do score differently
    assert (resumed.calls, resumed.prompts) == (fresh_run.calls, fresh_run.prompts)  # nothing of the old model kept
    assert out.read_bytes() == fresh_out.read_bytes() and df.equals(fresh)


def test_the_teacher_digest_is_memoised_and_names_the_content_not_the_file_dates(tmp_path, monkeypatch, caplog):
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    (teacher / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (teacher / "config.json").write_text('{"layers": 2}')
    digests = []
    real = model_digest.folder_sha256
    monkeypatch.setattr(model_digest, "folder_sha256", lambda d: digests.append(d) or real(d))
    cand = sj.write_candidates(tmp_path / "c.parquet", "hash")
    _, clean_run = sj.job(cand, tmp_path / "clean" / "s.parquet", "hash")
    out = tmp_path / "s.parquet"
    partial = tmp_path / "s.parquet.partial"

    sj.job(cand, out, "hash", model_dir=teacher, stop_at=2, block=False)
    assert len(digests) == 1 and (partial / TEACHER_MEMO).exists()
    sj.job(cand, out, "hash", model_dir=teacher, stop_at=4, block=False)  # resumed: 4 more batches, then stopped
    assert len(digests) == 1, "the teacher's files were read again though none changed"

    # The same bytes written again: new file dates, so the files are digested again, to the same digest.
    (teacher / "config.json").write_text('{"layers": 2}')
    caplog.set_level(logging.INFO)
    df, rerun = sj.job(cand, out, "hash", model_dir=teacher)
    assert len(digests) == 2 and "discarding" not in caplog.text
    assert rerun.calls == clean_run.calls - 2 - 4 and df is not None  # every flushed batch kept


def test_every_one_of_300_flipped_bytes_of_a_batch_file_is_caught_by_its_sha256(tmp_path, caplog):
    _, partial, _ = _interrupted(tmp_path)
    k = 1
    clean_bytes, clean_record = sp.batch_path(partial, k).read_bytes(), sp.record_path(partial, k).read_bytes()
    clean = pl.read_ipc(clean_bytes)
    whole = sp.resumed_batch(partial, k, clean)
    assert whole is not None and whole[0].equals(clean)  # untouched, the batch resumes
    caplog.set_level(logging.WARNING)
    caught = 0
    for pos, data in _flips(clean_bytes):
        sp.batch_path(partial, k).write_bytes(data)
        sp.record_path(partial, k).write_bytes(clean_record)
        got = sp.resumed_batch(partial, k, clean)
        if got is None:
            caught += 1
            assert not sp.batch_path(partial, k).exists() and not sp.record_path(partial, k).exists()
        else:  # never a changed score
            assert got[0].equals(clean), f"a flip at byte {pos} changed the batch's rows"
    assert caught == N_FLIPS  # every flip changes the sha256 of the bytes
    assert caplog.text.count(f"{sp.batch_path(partial, k)}: its bytes do not match the sha256") == N_FLIPS


def test_flipped_bytes_under_a_matching_sha256_never_crash_the_batch_reader(tmp_path):
    """The read guard behind the sha256: whatever the bytes, a batch is rows or DamagedBatch
    (Arrow errors and panics of the IPC reader included), never another exception."""
    _, partial, _ = _interrupted(tmp_path)
    clean_bytes = sp.batch_path(partial, 1).read_bytes()
    clean = pl.read_ipc(clean_bytes)
    rejected = 0
    for _, data in _flips(clean_bytes):
        try:
            got = sp.parse_batch(data, 1, clean)
        except sp.DamagedBatch:
            rejected += 1
        else:
            assert got.drop("score").equals(clean.drop("score"))
    assert rejected > 0


@pytest.mark.parametrize("where", [0.0, 0.2, 0.45, 0.6, 0.8, 1.0])
def test_a_resume_over_a_flipped_batch_file_writes_the_clean_output(tmp_path, caplog, where):
    cand, partial, n_batches = _interrupted(tmp_path)
    clean_out = tmp_path / "clean" / "s.parquet"
    batch = sp.batch_path(partial, 1)
    data = bytearray(batch.read_bytes())
    pos = min(int(where * len(data)), len(data) - 1)
    data[pos] ^= 0x5A
    batch.write_bytes(bytes(data))
    caplog.set_level(logging.INFO)
    df, rerun = sj.job(cand, tmp_path / "run" / "s.parquet", "hash")
    assert f"{batch}: its bytes do not match the sha256 in its record" in caplog.text
    assert rerun.calls == n_batches - 2  # batches 0 and 2 kept, batch 1 read again
    assert (tmp_path / "run" / "s.parquet").read_bytes() == clean_out.read_bytes()


class _PinnedHash(sj.HashScorer):
    """A ready-made scorer that knows its model's pin (as the scoring package's scorers do)."""

    def __init__(self, pin: str):
        self.model_identity = {"weights_sha256": pin}


def test_a_ready_made_scorer_of_another_model_discards_the_folder(tmp_path, caplog):
    cand = sj.write_candidates(tmp_path / "c.parquet", "hash")
    out = tmp_path / "s.parquet"
    sj.job(cand, out, "hash", scorer=_PinnedHash("a" * 64), stop_at=2, block=False)
    caplog.set_level(logging.INFO)
    sj.job(cand, out, "hash", scorer=_PinnedHash("a" * 64), stop_at=3, block=False)
    assert "already read" in caplog.text and "discarding" not in caplog.text
    caplog.clear()
    _, other = sj.job(cand, out, "hash", scorer=_PinnedHash("b" * 64))
    assert "another teacher (files sha256 aaaaaaaaaaaa... then, sha256 bbbbbbbbbbbb... now)" in caplog.text
    _, fresh = sj.job(cand, tmp_path / "fresh" / "s.parquet", "hash")
    assert other.calls == fresh.calls
