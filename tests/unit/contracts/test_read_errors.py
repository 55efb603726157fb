"""A damaged Parquet artifact is reported as SchemaError, never as a leaked panic.

polars raises a Rust ``PanicException`` (a BaseException, not an Exception) on some corrupt
inputs, e.g. key-value metadata that is not UTF-8; read_table and read_metadata turn every
failure of the reader into a SchemaError that names the file, the contract and the fix.
Reads that succeed must return the original values: the page checksums and content digest
(tests/unit/contracts/test_content_digest.py) turn every other outcome into a SchemaError.
"""

from __future__ import annotations

import collections
import random

import polars as pl
import pyarrow.parquet as pq
import pytest
from artifact_samples import scores_table, write_scores_sample

from presdep.contracts import schemas
from presdep.contracts.errors import SchemaError
from presdep.contracts.schemas import read_metadata, read_table

N_FLIPS = 400


@pytest.fixture
def scores_file(tmp_path):
    return write_scores_sample(tmp_path / "scores.parquet")


def _sweep(path, tmp_path):
    """Seeded single-byte flips; returns (counts, unexpected exceptions)."""
    data = path.read_bytes()
    ref = read_table(path, "scores")
    ref_meta = read_metadata(path)
    rng = random.Random(0)
    counts: collections.Counter = collections.Counter()
    unexpected = []
    bad = tmp_path / "flipped.parquet"
    for pos in rng.sample(range(len(data)), N_FLIPS):
        b = bytearray(data)
        b[pos] ^= rng.randrange(1, 256)
        bad.write_bytes(bytes(b))
        try:
            got = read_table(bad, "scores")
        except SchemaError as exc:
            counts["raised SchemaError"] += 1
            msg = str(exc)
            assert str(bad) in msg and "scores" in msg and "re-run the rule" in msg, msg
        except BaseException as exc:  # noqa: BLE001 - what the test is looking for
            unexpected.append(("read_table", pos, type(exc).__name__, str(exc)[:200]))
        else:
            counts["read equal" if got.equals(ref) else "read different"] += 1
        try:
            meta = read_metadata(bad)
        except SchemaError as exc:
            counts["metadata SchemaError"] += 1
            assert str(bad) in str(exc), str(exc)
        except BaseException as exc:  # noqa: BLE001
            unexpected.append(("read_metadata", pos, type(exc).__name__, str(exc)[:200]))
        else:
            assert isinstance(meta, dict)
            counts["metadata equal" if meta == ref_meta else "metadata different"] += 1
    return counts, unexpected


def test_single_byte_flips_give_schema_error_or_a_table(scores_file, tmp_path):
    counts, unexpected = _sweep(scores_file, tmp_path)
    print(f"\n{N_FLIPS} single-byte flips of a {scores_file.stat().st_size}-byte scores file: {dict(counts)}")
    assert not unexpected, unexpected[:10]
    assert counts["raised SchemaError"] + counts["read equal"] + counts["read different"] == N_FLIPS
    assert counts["raised SchemaError"] > 0  # the sweep does reach damage the reader notices
    # The checksums leave no silent change: a read that succeeds returns the original.
    assert counts["read different"] == 0 and counts["metadata different"] == 0, dict(counts)


@pytest.mark.parametrize("keep", [0, 3, 4, 100, "half", -8, -1])
def test_truncated_file_is_a_schema_error_naming_it(scores_file, keep):
    data = scores_file.read_bytes()
    n = len(data) // 2 if keep == "half" else keep % len(data) if keep < 0 else keep
    scores_file.write_bytes(data[:n])
    with pytest.raises(SchemaError) as err:
        read_table(scores_file, "scores")
    msg = str(err.value)
    assert str(scores_file) in msg and "'scores'" in msg and "re-run the rule that wrote it" in msg
    with pytest.raises(SchemaError, match="re-run the rule"):
        read_metadata(scores_file)


def test_metadata_that_is_not_utf8_is_a_schema_error(scores_file):
    """The damage that made polars panic: the key-value metadata no longer UTF-8."""
    from polars.exceptions import PanicException

    table = pq.read_table(scores_file)
    pq.write_table(table.replace_schema_metadata({b"presdep": b'{"kind": "sc\xffores"}'}), scores_file)
    with pytest.raises(PanicException):  # what read_table used to let through
        pl.from_arrow(pq.read_table(scores_file))
    with pytest.raises(SchemaError, match="not UTF-8") as err:
        read_table(scores_file, "scores")
    assert str(scores_file) in str(err.value) and "'scores'" in str(err.value)
    with pytest.raises(SchemaError, match="re-run the rule"):
        read_metadata(scores_file)


def test_a_panic_inside_the_reader_becomes_schema_error(scores_file, monkeypatch):
    from polars.exceptions import PanicException

    assert not issubclass(PanicException, Exception)  # why `except Exception` was not enough

    def panic(*a, **k):
        raise PanicException("called `Result::unwrap()` on an `Err` value: Utf8Error")

    monkeypatch.setattr(schemas.pl, "from_arrow", panic)
    with pytest.raises(SchemaError, match="PanicException") as err:
        read_table(scores_file, "scores")
    assert str(scores_file) in str(err.value)
    assert isinstance(err.value.__cause__, PanicException)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_interrupts_pass_through_unchanged(scores_file, monkeypatch, exc):
    def stop(*a, **k):
        raise exc()

    monkeypatch.setattr(schemas.pq, "read_table", stop)
    monkeypatch.setattr(schemas.pq, "read_schema", stop)
    monkeypatch.setattr(schemas.pq, "read_metadata", stop)
    with pytest.raises(exc):
        read_table(scores_file, "scores")
    with pytest.raises(exc):
        read_metadata(scores_file)


def test_missing_file_is_still_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_table(tmp_path / "absent.parquet", "scores")
    with pytest.raises(FileNotFoundError):
        read_metadata(tmp_path / "absent.parquet")


def test_intact_file_reads_back(scores_file):
    assert read_table(scores_file, "scores").equals(
        pl.from_arrow(pq.read_table(scores_file)).select(scores_table().columns))
    assert read_metadata(scores_file)["kind"] == "scores"
