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


def test_checksum_and_name_formats_are_pinned():
    assert entry_checksum("k", b"v") == hashlib.sha256(b"\x01" + b"\0" * 7 + b"kv").digest()
    assert entry_checksum("k", b"v").hex() == "bc5661dd94d9d56c3b94a225880b359369d233340b047a92f0110004105a276d"
    assert entry_checksum("ab", b"") != entry_checksum("a", b"b")  # the key's length is covered
    assert shard_name(["b", "a"]) == hashlib.sha256(b"a\nb").hexdigest()[:40] + ".parquet"
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
