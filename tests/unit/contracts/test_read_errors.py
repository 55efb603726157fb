"""A damaged Parquet artifact is reported as SchemaError, never as a leaked panic.

polars raises a Rust ``PanicException`` (a BaseException, not an Exception) on some corrupt
inputs, e.g. key-value metadata that is not UTF-8; read_table and read_metadata turn every
failure of the reader into a SchemaError that names the file, the contract and the fix.
Reads that succeed must return the original values: the page checksums and content digest
(tests/unit/contracts/test_content_digest.py) turn every other outcome into a SchemaError.
"""

from __future__ import annotations

import collections
import logging
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


# ------------------------------------------------------- JSON artifacts a later rule reads

JSON_FLIPS = 1500  # seeded single-bit flips per artifact kind (every bit where the file has fewer)


def _thresholds_file(tmp_path):
    """A threshold artifact as the thresholds rule writes it (12 queries, 3 shuffles)."""
    from presdep.metrics.thresholds import tune_thresholds, write_thresholds

    rng = random.Random(3)
    rows, qrels = [], []
    for q in range(12):
        docs = [f"q{q}-d{i}" for i in range(6)]
        qrels += [(f"q{q}", d, int(rng.random() < 0.3)) for d in docs]
        rows += [(f"q{q}", d, "first_stage", 0, i, 0.0) for i, d in enumerate(docs)]
        for m in range(3):
            rows += [(f"q{q}", d, "random_shuffle", m, (i + m) % 6, rng.random()) for i, d in enumerate(docs)]
    scores = pl.DataFrame(rows, schema=["query_id", "doc_id", "perturbation", "presentation", "position", "score"],
                          orient="row")
    qrels_df = pl.DataFrame(qrels, schema=["query_id", "doc_id", "relevance"], orient="row")
    path = tmp_path / "thresholds" / "v" / "d.json"
    write_thresholds(tune_thresholds(scores, qrels_df, split_seed=7), path, {"split_seed": 7})
    return path


def _training_run(tmp_path):
    """A training run's done.json beside its heldout.parquet (as train_student leaves them)."""
    from presdep.contracts.json_artifacts import write_json_artifact

    d = tmp_path / "models" / "s__lambda1" / "seed42"
    d.mkdir(parents=True)
    pl.DataFrame({"step": [2, 2, 4, 4], "query_id": ["a", "b"] * 2, "ndcg10": [0.5, 0.25, 0.75, 0.5]}).write_parquet(
        d / "heldout.parquet")
    write_json_artifact(d / "done.json", {"seed": 42, "steps": 4, "heldout": {"2": 0.375, "4": 0.625},
                                          "heldout_score_std": {"2": 0.0123, "4": 0.0456},
                                          "student": {"objective": "oc_sft", "lambda": 1.0}, "adapter": "adapter"},
                        default=str)
    return d


def _selected_file(tmp_path):
    from presdep.contracts.json_artifacts import write_json_artifact
    from presdep.training.select import select_lambda_files

    runs = []
    for seed in (42, 43):
        d = tmp_path / "runs" / f"seed{seed}"
        (d / "checkpoints" / "step000002" / "adapter").mkdir(parents=True)
        (d / "checkpoints" / "step000002" / "adapter" / "adapter_config.json").write_text("{}")
        pl.DataFrame({"step": [2, 2], "query_id": ["a", "b"], "ndcg10": [0.5, 0.25]}).write_parquet(
            d / "heldout.parquet")
        write_json_artifact(d / "done.json", {"heldout_score_std": {"2": 0.5}})
        runs.append({"lambda": 0.0, "seed": seed, "dir": str(d)})
    out = tmp_path / "models" / "v" / "selected.json"
    select_lambda_files(runs=runs, out_path=out, rule="checkpoint", task="rerank", params={"objective": "perm_aug"})
    return out


def _stability_file(tmp_path):
    from presdep.report.stability_io import write_stability_json

    res = {"column": "rerank_tau_psi", "direction": "lower", "meanKendallTau": 0.8125, "probabilityFirst":
           {"OC-SFT": 0.75, "Off the shelf": 0.25}, "rankInterval95": {"OC-SFT": [1, 2], "Off the shelf": [1, 2]},
           "sharedItems": 35, "resamples": 500, "seed": 4, "warnings": ["few items"], "flagged": {}}
    return write_stability_json({"presdepVersion": "0", "columns": {"rerank_tau_psi": res}, "skipped": {}},
                                tmp_path / "stability" / "table1.json")


def _index_dir(tmp_path):
    from presdep.candidates.bm25 import STATS_FILE
    from presdep.contracts.json_artifacts import write_json_artifact

    d = tmp_path / "indexes" / "scifact"
    d.mkdir(parents=True)
    write_json_artifact(d / STATS_FILE, {"corpus": {"sha256": "ab" * 32, "documents": 5183}, "layout": 1,
                                         "stats": {"documents": 5183, "total_terms": 1234567},
                                         "indexer": {"pyserini": "1.6.0", "java": "25"}, "build_seconds": 14.5})
    return d


def _json_kinds(tmp_path):
    """Per artifact kind: the file to damage, and a read through the code a later rule reads it with."""
    from presdep.candidates.bm25 import STATS_FILE, read_index_info
    from presdep.contracts.selection import adapter_for
    from presdep.metrics.thresholds import read_thresholds
    from presdep.report.stability_io import read_stability_json
    from presdep.training.select import read_run

    run = _training_run(tmp_path)
    selected = _selected_file(tmp_path)
    index = _index_dir(tmp_path)
    return {
        "thresholds": (_thresholds_file(tmp_path), read_thresholds),
        "done.json": (run / "done.json", lambda p: (read_run(p.parent).per_query, read_run(p.parent).score_std)),
        "selected.json": (selected, lambda p: (adapter_for(p, 42), adapter_for(p, 43))),
        "stability": (_stability_file(tmp_path), read_stability_json),
        "bm25 index record": (index / STATS_FILE, lambda p: read_index_info(p.parent)),
    }


def _flips(data: bytes, seed: int = 0) -> list[int]:
    bits = range(8 * len(data))
    return list(bits) if len(bits) <= JSON_FLIPS else random.Random(seed).sample(bits, JSON_FLIPS)


@pytest.mark.parametrize("kind", ["thresholds", "done.json", "selected.json", "stability", "bm25 index record"])
def test_json_artifact_single_bit_flips_are_all_refused_naming_the_file(tmp_path, kind):
    """Every flip is refused with a SchemaError naming the file (canonical JSON has no
    insignificant byte, so not even an identical document comes back); 0 silent changes and 0
    other exceptions (no UnicodeDecodeError, JSONDecodeError or KeyError)."""
    path, read = _json_kinds(tmp_path)[kind]
    data = path.read_bytes()
    ref = read(path)
    counts: collections.Counter = collections.Counter()
    unexpected = []
    for bit in _flips(data):
        b = bytearray(data)
        b[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(b))
        try:
            got = read(path)
        except SchemaError as exc:
            msg = str(exc)
            ok = str(path) in msg and schemas.REBUILD_HINT in msg and "\n" not in msg
            counts["refused" if ok else "refused without naming the file"] += 1
        except BaseException as exc:  # noqa: BLE001 - what the test is looking for
            unexpected.append((bit, type(exc).__name__, str(exc)[:200]))
        else:
            counts["read equal" if got == ref else "read different"] += 1
    path.write_bytes(data)
    assert read(path) == ref
    n = len(_flips(data))
    print(f"\n{kind}: {n} single-bit flips of a {len(data)}-byte file: {dict(counts)}")
    assert not unexpected, unexpected[:10]
    assert counts["read different"] == 0 and counts["refused"] == n, dict(counts)


def test_hosted_reply_cache_single_bit_flips_are_set_aside_never_served(tmp_path, caplog):
    """A cached hosted reply (paid for) with one flipped bit is renamed aside and asked again,
    never served changed: its digest covers the reply and the request it answers."""
    from presdep.training.hosted_cache import ReplyCache, request_key

    request = {"endpoint": "https://api.example.test/v1/chat/completions", "attempt": 0, "template_sha256": "cd" * 32,
               "body": {"model": "teacher-1", "temperature": 0,
                        "messages": [{"role": "user", "content": "Grade each passage for: café prices\n[1] ..."}]}}
    entry = {"content": "[1] Grade: 3\n[2] Grade: 0\n[3] Grade: 2", "prompt_tokens": 187, "completion_tokens": 21,
             "request": request}
    cache, key = ReplyCache(tmp_path / "cache"), request_key(request)
    cache.put(key, entry)
    path = cache.path(key)
    data = path.read_bytes()
    assert cache.get(key, request) == entry
    caplog.set_level(logging.WARNING, logger="presdep.training.hosted_cache")
    counts: collections.Counter = collections.Counter()
    for bit in _flips(data, seed=1):
        b = bytearray(data)
        b[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(b))
        caplog.clear()
        got = ReplyCache(tmp_path / "cache").get(key, request)
        if got is None:
            aside = path.with_name(path.name + ".bad")
            assert aside.exists() and not path.exists() and path.name in caplog.text
            aside.unlink()
            counts["set aside"] += 1
        else:
            counts["served equal" if got == entry else "served different"] += 1
    print(f"\nhosted reply cache: {len(_flips(data, seed=1))} single-bit flips of a {len(data)}-byte entry: "
          f"{dict(counts)}")
    assert counts["served different"] == 0 and counts["set aside"] == len(_flips(data, seed=1)), dict(counts)
