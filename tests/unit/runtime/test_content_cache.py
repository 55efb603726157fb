"""The shared content-cache machinery: pinned checksum and shard-name formats (a change
would quarantine every stored shard, so it needs a FORMAT_VERSION bump), and the hooks a
cache gives (canonical bytes, validation) applied on every read."""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from presdep.runtime.content_cache import QUARANTINE_DIR, ContentCache, entry_checksum, shard_name, shard_schema
from presdep.scoring.answer_cache import AnswerCache
from presdep.scoring.read_cache import ReadCache

ID = "ab" * 32  # an identity key (the folder name: a sha256 in hex)
PINNED_CHECKSUM = "422cf2aa8a00df2f7508ca8597490abac6deadaacb3d3428ef894883ea88905f"


def test_checksum_and_name_formats_are_pinned():
    assert entry_checksum(ID, "k", b"v") == hashlib.sha256(bytes.fromhex(ID) + b"\x01" + b"\0" * 7 + b"kv").digest()
    assert entry_checksum(ID, "k", b"v").hex() == PINNED_CHECKSUM
    assert entry_checksum(ID, "ab", b"") != entry_checksum(ID, "a", b"b")  # the key's length is covered
    assert entry_checksum(ID, "k", b"v") != entry_checksum("cd" * 32, "k", b"v")  # the identity is covered
    assert shard_name(ID, ["b", "a"]) == hashlib.sha256(f"{ID}\na\nb".encode()).hexdigest()[:40] + ".parquet"
    assert shard_name(ID, ["a"]) != shard_name("cd" * 32, ["a"])
    assert shard_name(ID, ["b", "a"], part=True) == "part-" + shard_name(ID, ["a", "b"])  # a running job's flush
    assert ReadCache._canonical(None, np.array([[0.5, 0.5, 0.0, 0.0]])) == (
        np.array([1, 4], "<i8").tobytes() + np.array([0.5, 0.5, 0.0, 0.0], "<f8").tobytes())
    assert AnswerCache._canonical(None, "é") == "é".encode()


class Even(ContentCache):
    """A toy cache of even integers: the validation hook refuses odd ones on read."""

    SCHEMA = shard_schema(("n", pa.int64()))
    FORMAT_VERSION = 1
    KIND = "even cache"

    def _check(self, value):
        return int(value)

    def _canonical(self, value):
        return int(value).to_bytes(8, "little", signed=True)

    def _validate(self, value):
        return None if value % 2 == 0 else "odd"

    def _decode(self, table):
        for n in table.column("n").to_pylist():
            yield (None, "no number") if n is None else (n, None)

    def _encode(self, keys, entries):
        return {"n": pa.array([entries[k] for k in keys], pa.int64())}


def test_hooks_apply_on_read_and_page_checksums_are_written(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="presdep.runtime.content_cache")
    c = Even(tmp_path, {"x": 1})
    c.put("two", 2)
    good = c.flush()
    assert pq.ParquetFile(good).metadata.num_rows == 1
    odd = c._write_shard({"three": 3})  # a bypass: put() of this toy checks nothing
    fresh = Even(tmp_path, {"x": 1})
    assert fresh.lookup(["two", "three"]) == {"two": 2}
    assert (tmp_path / fresh.key / QUARANTINE_DIR / odd.name).exists() and good.exists()
    assert "even cache" in caplog.text and "odd" in caplog.text and "1 entries" in caplog.text
    st = fresh.stats()
    assert (st["quarantined_shards"], st["quarantined_entries"], st["misses"], st["hits"]) == (1, 1, 1, 1)
    # Written with page CRCs: damage inside a data page fails the read itself.
    raw = bytearray(good.read_bytes())
    pos = raw.index((2).to_bytes(8, "little"))  # the plain-encoded value
    raw[pos] ^= 0x04  # 2 -> 6: still even, and the entry checksum is not even needed
    good.write_bytes(bytes(raw))
    caplog.clear()
    assert Even(tmp_path, {"x": 1}).lookup(["two"]) == {}
    assert "CRC checksum verification failed" in caplog.text
