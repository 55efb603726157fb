"""Integrity of the shared content caches (read cache, answer cache): a stored value is served
exactly as written or not at all. Damaged shards are reported, moved to quarantine/, and
their entries missed (so the caller computes them again)."""

from __future__ import annotations

import logging
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from presdep.contracts.errors import InvalidInput
from presdep.runtime.content_cache import CHECKSUM_COLUMN, IDENTITY_META, QUARANTINE_DIR, identity_key
from presdep.scoring.answer_cache import AnswerCache
from presdep.scoring.read_cache import SUM_TOLERANCE, ReadCache

IDENT = {"model": {"test": "integrity"}, "dtype": "float32"}
LOGGER = "presdep.runtime.content_cache"


def softmax_entries(slots: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    """Entries like the readout's: float64 softmax over four grade logits per slot."""
    rng = np.random.default_rng(seed)
    out = {}
    for i, n in enumerate(slots):
        logits = rng.normal(size=(n, 4)) * 3.0
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        out[f"{i:02d}" + "ab" * 31] = p / p.sum(axis=1, keepdims=True)
    return out


TEXTS = {"k-paris": "Paris", "k-empty": "", "k-long": "The answer is 42 because " * 8,
         "k-unicode": "naïve café – 東京 ✓"}


def same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


def write_shard(make, root: Path, entries: dict) -> tuple[Path, bytes]:
    cache = make(root)
    for k, v in entries.items():
        cache.put(k, v)
    shard = cache.flush()
    assert shard is not None
    return shard, shard.read_bytes()


def without_page_checksums(shard: Path) -> bytes:
    """The same table written without Parquet page CRCs: flips then reach the entry checksums."""
    pq.write_table(pq.read_table(shard), shard, write_page_checksum=False)
    return shard.read_bytes()


def flip_sweep(make, key: str, name: str, pristine: bytes, want: dict, flips: int, tmp_path: Path, caplog,
               seed: int = 0) -> dict[str, int]:
    """Flip one byte (XOR a random non-zero mask at a random offset) of a shard, ``flips``
    times; after each, a fresh cache over the damaged copy must serve every key with its
    original value or not at all, and a damaged shard must be reported and quarantined."""
    rng = random.Random(seed)
    counts = {"detected": 0, "harmless": 0}
    for t in range(flips):
        pos, mask = rng.randrange(len(pristine)), rng.randrange(1, 256)
        blob = bytearray(pristine)
        blob[pos] ^= mask
        root = tmp_path / f"flip{t}"
        ident_dir = root / key
        ident_dir.mkdir(parents=True)
        (ident_dir / name).write_bytes(bytes(blob))
        caplog.clear()
        fresh = make(root)
        got = fresh.lookup(list(want))
        for k, v in got.items():
            assert same(v, want[k]), f"flip {t} (byte {pos} ^ {mask:#04x}) served a different value for {k}"
        warned = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
        if fresh.quarantined_shards:
            assert got == {} and fresh.misses == len(want), f"flip {t}: a quarantined shard served entries"
            assert (ident_dir / QUARANTINE_DIR / name).exists() and not (ident_dir / name).exists()
            assert len(warned) == 1 and name in warned[0] and "entries;" in warned[0]
            assert fresh.stats()["quarantined_shards"] == 1
            assert make(root).lookup(list(want)) == {}  # the next cache never reads it again
            counts["detected"] += 1
        else:
            assert set(got) == set(want) and not warned and (ident_dir / name).exists()
            counts["harmless"] += 1
        shutil.rmtree(root)
    return counts


@pytest.mark.parametrize("page_crc", [True, False], ids=["page-crc", "entry-checksum-only"])
def test_read_cache_single_byte_flips_never_serve_a_changed_value(tmp_path, caplog, page_crc):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    want = softmax_entries([1, 3, 5, 2, 4])

    def make(root):
        return ReadCache(root, IDENT)

    shard, pristine = write_shard(make, tmp_path / "pristine", want)
    if not page_crc:
        pristine = without_page_checksums(shard)
    intact = make(tmp_path / "pristine").lookup(list(want))
    assert intact.keys() == want.keys() and all(same(intact[k], want[k]) for k in want)
    counts = flip_sweep(make, make(tmp_path / "pristine").key, shard.name, pristine, want, 200, tmp_path, caplog)
    print(f"\nread cache sweep ({'with' if page_crc else 'without'} page CRCs, {len(pristine)}-byte shard, "
          f"200 flips): {counts}")
    assert counts["detected"] + counts["harmless"] == 200 and counts["detected"] > 100


@pytest.mark.parametrize("page_crc", [True, False], ids=["page-crc", "entry-checksum-only"])
def test_answer_cache_single_byte_flips_never_serve_a_changed_text(tmp_path, caplog, page_crc):
    caplog.set_level(logging.WARNING, logger=LOGGER)

    def make(root):
        return AnswerCache(root, IDENT)

    shard, pristine = write_shard(make, tmp_path / "pristine", TEXTS)
    if not page_crc:
        pristine = without_page_checksums(shard)
    counts = flip_sweep(make, make(tmp_path / "pristine").key, shard.name, pristine, TEXTS, 60, tmp_path, caplog,
                        seed=1)
    print(f"\nanswer cache sweep ({'with' if page_crc else 'without'} page CRCs, {len(pristine)}-byte shard, "
          f"60 flips): {counts}")
    assert counts["detected"] + counts["harmless"] == 60 and counts["detected"] > 30


def rewrite_column(shard: Path, column: str, values: pa.Array) -> None:
    """Replace one value column and write the shard back with valid page CRCs, keeping the
    stored checksums: damage that happened before the bytes reached the page (in memory)."""
    table = pq.read_table(shard)
    table = table.set_column(table.schema.get_field_index(column), column, values)
    pq.write_table(table, shard, write_page_checksum=True)


def test_a_flipped_probability_bit_is_quarantined_reported_and_recomputed(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    want = softmax_entries([2, 3, 1])
    shard, _ = write_shard(lambda r: ReadCache(r, IDENT), tmp_path, want)
    # One ulp off in one stored probability: still a valid distribution, so only the
    # entry checksum can tell.
    probs = pq.read_table(shard).column("probs").combine_chunks()
    flat = probs.values.to_numpy().copy()
    flat.view("<u8")[3] ^= 1
    rewrite_column(shard, "probs", pa.ListArray.from_arrays(probs.offsets, pa.array(flat)))

    fresh = ReadCache(tmp_path, IDENT)
    (msg,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert shard.name in msg and "3 entries" in msg and "checksum mismatch" in msg and "quarantine" in msg
    qdir = tmp_path / fresh.key / QUARANTINE_DIR
    assert (qdir / shard.name).exists() and not shard.exists() and fresh.shards() == []
    assert fresh.lookup(list(want)) == {} and fresh.misses == 3 and fresh.hits == 0
    st = fresh.stats()
    assert (st["quarantined_shards"], st["quarantined_entries"]) == (1, 3)

    # The caller computes them again; the next cache serves the recomputed values.
    for k, v in want.items():
        fresh.put(k, v)
    again = fresh.flush()
    assert again == shard  # the same keys, the same shard name; the damaged copy stays in quarantine
    served = ReadCache(tmp_path, IDENT).lookup(list(want))
    assert served.keys() == want.keys() and all(same(served[k], want[k]) for k in want)

    # A second damaged copy of that shard does not overwrite the first one in quarantine.
    shard.write_bytes(b"PAR1 not a parquet file PAR1")
    caplog.clear()
    third = ReadCache(tmp_path, IDENT)
    (msg,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "unreadable" in msg and "? entries" in msg and shard.name in msg
    assert (qdir / shard.name).exists() and (qdir / f"{shard.name}.1").exists()
    assert third.lookup(list(want)) == {} and third.stats()["quarantined_shards"] == 1


def test_a_shard_appearing_later_is_checked_on_refresh(tmp_path, caplog):
    """A corrupt shard another job wrote while this cache was open is quarantined at the next lookup."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    good, bad = softmax_entries([2, 2], seed=1), softmax_entries([3], seed=2)
    bad = {"zz" + k[2:]: v for k, v in bad.items()}
    mine = ReadCache(tmp_path, IDENT)
    for k, v in good.items():
        mine.put(k, v)
    mine.flush()
    other = ReadCache(tmp_path, IDENT)
    (k_bad,) = bad
    other.put(k_bad, bad[k_bad])
    shard = other.flush()
    rewrite_column(shard, CHECKSUM_COLUMN, pa.array([b"\0" * 32], pa.binary(32)))
    found = mine.lookup([*good, k_bad])
    assert found.keys() == good.keys() and mine.misses == 1
    assert (tmp_path / mine.key / QUARANTINE_DIR / shard.name).exists()
    assert mine.stats()["quarantined_shards"] == 1 and "checksum mismatch" in caplog.text


def test_a_shard_with_a_lost_row_is_quarantined(tmp_path, caplog):
    """A row dropped (or added) leaves checksums intact but the shard's name no longer the hash of its keys."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    want = softmax_entries([1, 2, 3])
    shard, _ = write_shard(lambda r: ReadCache(r, IDENT), tmp_path, want)
    pq.write_table(pq.read_table(shard).slice(0, 2), shard, write_page_checksum=True)
    fresh = ReadCache(tmp_path, IDENT)
    assert fresh.lookup(list(want)) == {} and fresh.quarantined_entries == 2
    assert "not the hash of its identity and keys" in caplog.text


REFUSED = [  # (what the refusal names, [slots, 4] values)
    ("outside [0, 1]", [[1.25, -0.25, 0.0, 0.0]]),
    ("sum to", [[0.3, 0.3, 0.3, 0.3]]),
    ("not finite", [[np.nan, 0.5, 0.5, 0.0]]),
    ("not finite", [[np.inf, 0.0, 0.0, 0.0]]),
    ("sum to", [[0.25 + 2 * SUM_TOLERANCE, 0.25, 0.25, 0.25]]),
]


def test_values_that_are_not_distributions_are_refused_on_put_and_on_read(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    c = ReadCache(tmp_path, IDENT)
    near = np.array([[0.25 + SUM_TOLERANCE / 2, 0.25, 0.25, 0.25]])  # within the stated tolerance
    c.put("near", near)
    c.flush()
    shards = {}
    for i, (why, rows) in enumerate(REFUSED):
        arr = np.array(rows, dtype=np.float64)
        with pytest.raises(InvalidInput, match=re.escape(why)):
            c.put(f"bad{i}", arr)
        shards[f"bad{i}"] = (c._write_shard({f"bad{i}": arr}), why)  # test-only bypass of put's check
    assert not caplog.records
    fresh = ReadCache(tmp_path, IDENT)
    got = fresh.lookup([*shards, "near"])
    assert got.keys() == {"near"} and same(got["near"], near)
    assert fresh.stats()["quarantined_shards"] == len(REFUSED)
    msgs = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    for path, why in shards.values():
        assert (tmp_path / fresh.key / QUARANTINE_DIR / path.name).exists()
        (msg,) = [m for m in msgs if path.name in m]
        assert why in msg and "1 entries" in msg


def test_a_changed_answer_text_is_quarantined_and_missed(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    shard, _ = write_shard(lambda r: AnswerCache(r, IDENT), tmp_path, TEXTS)
    texts = pq.read_table(shard).column("text").to_pylist()
    texts[texts.index("Paris")] = "Parts"
    rewrite_column(shard, "text", pa.array(texts, pa.string()))
    fresh = AnswerCache(tmp_path, IDENT)
    assert fresh.lookup(list(TEXTS)) == {} and fresh.misses == len(TEXTS)
    assert (tmp_path / fresh.key / QUARANTINE_DIR / shard.name).exists()
    assert fresh.stats()["quarantined_entries"] == len(TEXTS)
    assert "answer cache" in caplog.text and "checksum mismatch" in caplog.text and shard.name in caplog.text


def test_format_versions_were_bumped(tmp_path):
    """Shards of the older formats (no checksum; a checksum without the identity; reads of
    grade logits in the model's dtype) live under other identity folders and are not read: a
    cold cache."""
    for cls, version in ((ReadCache, 4), (AnswerCache, 3)):
        c = cls(tmp_path, IDENT)
        assert cls.FORMAT_VERSION == version
        assert c.key not in {identity_key(c.identity, v) for v in range(1, version)}
        assert c.SCHEMA.field(CHECKSUM_COLUMN).type == pa.binary(32)
        c.put("k", TEXTS["k-paris"] if cls is AnswerCache else softmax_entries([1])["00" + "ab" * 31])
        shard = c.flush()
        assert pq.read_metadata(shard).metadata[IDENTITY_META] == c.key.encode()


STUDENT = {"model": {"test": "integrity"}, "dtype": "float32", "adapter_sha256": "student"}
CACHES = {  # cache class, the values identity X (a student) stored, those identity Y (off the shelf) computes
    "read": (ReadCache, softmax_entries([2, 3, 1], seed=5), softmax_entries([2, 3, 1], seed=6)),
    "answer": (AnswerCache, TEXTS, {k: v + " (off the shelf)" for k, v in TEXTS.items()}),
}


@pytest.mark.parametrize("kind", CACHES)
def test_a_shard_copied_from_another_identity_is_quarantined_never_served(tmp_path, caplog, kind):
    """The same prompts (so the same keys and a valid checksum per entry under the old format)
    under another identity: nothing of the copied shard is served, it is quarantined with one
    warning naming both identities, and the caller computes the entries again."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cls, theirs, ours = CACHES[kind]
    x = cls(tmp_path, STUDENT)
    for k, v in theirs.items():
        x.put(k, v)
    shard = x.flush()
    y_dir = tmp_path / cls(tmp_path, IDENT).key
    copied = y_dir / shard.name
    shutil.copy(shard, copied)
    caplog.clear()
    y = cls(tmp_path, IDENT)
    assert y.lookup(list(theirs)) == {} and y.misses == len(theirs) and y.hits == 0
    (msg,) = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert x.key in msg and y.key in msg and shard.name in msg and f"{len(theirs)} entries" in msg
    assert "another identity" in msg and "quarantine" in msg
    assert (y_dir / QUARANTINE_DIR / shard.name).exists() and not copied.exists()
    assert y.stats()["quarantined_shards"] == 1
    # Computed again under Y; Y serves its own values, X keeps serving its own.
    for k, v in ours.items():
        y.put(k, v)
    assert y.flush().name != shard.name  # the identity is in the name: a copy never replaces Y's own shard
    served_y, served_x = cls(tmp_path, IDENT).lookup(list(ours)), cls(tmp_path, STUDENT).lookup(list(theirs))
    assert all(same(served_y[k], ours[k]) for k in ours) and all(same(served_x[k], theirs[k]) for k in theirs)
    assert served_y.keys() == ours.keys() and served_x.keys() == theirs.keys()


def test_a_copied_shard_with_its_identity_rewritten_fails_its_checksums(tmp_path, caplog):
    """Metadata claiming the folder's identity does not help: every entry's checksum covers the
    identity it was computed under."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    theirs = softmax_entries([1, 2], seed=7)
    shard, _ = write_shard(lambda r: ReadCache(r, STUDENT), tmp_path, theirs)
    y = ReadCache(tmp_path, IDENT)
    table = pq.read_table(shard).replace_schema_metadata({IDENTITY_META: y.key.encode()})
    forged = y.dir / shard.name
    pq.write_table(table, forged, write_page_checksum=True)
    caplog.clear()
    fresh = ReadCache(tmp_path, IDENT)
    assert fresh.lookup(list(theirs)) == {} and (fresh.dir / QUARANTINE_DIR / shard.name).exists()
    assert "checksum mismatch" in caplog.text


def test_a_shard_without_its_identity_is_refused(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    want = softmax_entries([2])
    shard, _ = write_shard(lambda r: ReadCache(r, IDENT), tmp_path, want)
    pq.write_table(pq.read_table(shard).replace_schema_metadata(None), shard, write_page_checksum=True)
    fresh = ReadCache(tmp_path, IDENT)
    assert fresh.lookup(list(want)) == {} and fresh.quarantined_shards == 1
    assert "written under no identity" in caplog.text and fresh.key in caplog.text


def test_the_job_shard_holds_the_jobs_own_values_and_replaces_a_damaged_part(tmp_path, caplog):
    """The job shard is written from the values the job computed or verified, never re-read from
    its parts: a part damaged on disk meanwhile is removed with the others, its entries kept."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    a, b = softmax_entries([1, 2], seed=3), softmax_entries([2], seed=4)
    b = {"zz" + k[2:]: v for k, v in b.items()}
    c = ReadCache(tmp_path, IDENT)
    for k, v in a.items():
        c.put(k, v)
    first = c.flush()
    for k, v in b.items():
        c.put(k, v)
    second = c.flush()
    assert first.name.startswith("part-") and second.name.startswith("part-")
    second.write_bytes(second.read_bytes()[:-20])  # truncated: footer gone
    out = c.write_job_shard()
    assert sorted(p.name for p in (tmp_path / c.key).glob("*.parquet")) == [out.name]
    assert not out.name.startswith("part-") and c.quarantined_shards == 0
    fresh = ReadCache(tmp_path, IDENT)
    got = fresh.lookup([*a, *b])
    assert got.keys() == {*a, *b} and all(same(got[k], {**a, **b}[k]) for k in got)
    assert fresh.quarantined_shards == 0 and "refused" not in caplog.text
