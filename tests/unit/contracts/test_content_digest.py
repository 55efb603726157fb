"""Every artifact carries checksums verified on read: no damaged byte is ever served.

write_table stores Parquet page checksums (CRC32 per page) and two SHA-256 digests in the
schema metadata: ``presdep_sha256`` over a canonical, layout-independent encoding of the table
and the ``presdep`` JSON, ``presdep_meta_sha256`` over the JSON alone (what read_metadata,
which reads only the footer, verifies). A file without digests (older presdep, or written by
hand) is read with one logged warning.
"""

from __future__ import annotations

import collections
import json
import logging
import random

import polars as pl
import pyarrow.parquet as pq
import pytest
from artifact_samples import scores_table, write_scores_sample

from presdep.contracts import schemas
from presdep.contracts.errors import SchemaError
from presdep.contracts.schemas import (
    DIGEST_KEY,
    META_DIGEST_KEY,
    METADATA_KEY,
    REBUILD_HINT,
    artifact_metadata,
    content_digest,
    read_metadata,
    read_table,
    write_table,
)

N_FLIPS = 400  # seeded positions of the sweep (random.Random(0))


@pytest.fixture
def scores_file(tmp_path):
    return write_scores_sample(tmp_path / "scores.parquet")


def _meta_json(path) -> bytes:
    return pq.read_metadata(path).metadata[METADATA_KEY]


def test_written_file_carries_both_digests_and_page_checksums(scores_file):
    md = pq.read_metadata(scores_file).metadata
    raw = md[METADATA_KEY]
    assert md[DIGEST_KEY] == content_digest(read_table(scores_file, "scores"), raw).encode()
    assert md[META_DIGEST_KEY] == schemas.metadata_digest(raw).encode()
    assert json.loads(raw)["kind"] == "scores"
    # Page checksums: damage inside a data page fails pyarrow's CRC check on read.
    col = pq.read_metadata(scores_file).row_group(0).column(1)  # doc_id: distinct strings
    start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    last = start + col.total_compressed_size - 1  # the last byte of the column's last page
    data = bytearray(scores_file.read_bytes())
    data[last] ^= 0x01
    scores_file.write_bytes(bytes(data))
    with pytest.raises(SchemaError, match="(?i)crc") as err:
        read_table(scores_file, "scores")
    assert str(scores_file) in str(err.value) and "re-run the rule" in str(err.value)
    assert read_metadata(scores_file)["kind"] == "scores"  # the footer is intact


def test_single_byte_flips_are_detected_or_harmless(scores_file, tmp_path, capsys):
    """Every flip either raises SchemaError or reads back data and metadata equal to the original."""
    logging.disable(logging.WARNING)  # the sweep's files are damaged copies: no log noise
    try:
        data = scores_file.read_bytes()
        ref, ref_meta = read_table(scores_file, "scores"), read_metadata(scores_file)
        rng = random.Random(0)
        counts: collections.Counter = collections.Counter()
        served = []  # (reader, position, xor) of a flip that read back something different
        bad = tmp_path / "flipped.parquet"
        for pos in rng.sample(range(len(data)), N_FLIPS):
            xor = rng.randrange(1, 256)
            b = bytearray(data)
            b[pos] ^= xor
            bad.write_bytes(bytes(b))
            try:
                got = read_table(bad, "scores")
            except SchemaError as exc:
                counts["table detected"] += 1
                table_ok = False
                assert str(bad) in str(exc) and "re-run the rule" in str(exc), str(exc)
            else:
                table_ok = True
                if got.equals(ref):
                    counts["table harmless"] += 1
                else:
                    served.append(("read_table", pos, xor))
            try:
                meta = read_metadata(bad)
            except SchemaError as exc:
                counts["metadata detected"] += 1
                meta_ok = False
                assert str(bad) in str(exc) and "re-run the rule" in str(exc), str(exc)
            else:
                meta_ok = True
                if meta == ref_meta:
                    counts["metadata harmless"] += 1
                else:
                    served.append(("read_metadata", pos, xor))
            counts["flip harmless to both" if table_ok and meta_ok else "flip detected"] += 1
    finally:
        logging.disable(logging.NOTSET)
    with capsys.disabled():
        print(f"\n{N_FLIPS} seeded single-byte flips of a {len(data)}-byte scores file: {dict(counts)}")
    assert not served, served
    assert counts["table detected"] + counts["table harmless"] == N_FLIPS
    assert counts["metadata detected"] + counts["metadata harmless"] == N_FLIPS
    assert counts["table detected"] > N_FLIPS // 2


def test_footer_that_parses_short_is_refused(scores_file):
    """A flip that empties the key-value list used to make the file look digest-less (legacy)."""
    data = bytearray(scores_file.read_bytes())
    entry = data.rfind(b"\x18\x07presdep\x18")  # the first key-value entry: key "presdep"
    header = entry - 1  # the Thrift compact list header: (count << 4) | struct
    assert entry > 0 and data[header] & 0x0F == 0x0C and data[header] >> 4 == 4, data[header - 4 : entry + 12]
    data[header] &= 0x0F  # count 0: the entries that follow parse as other fields, then "stop"
    scores_file.write_bytes(bytes(data))
    assert not pq.read_metadata(scores_file).metadata  # pyarrow alone sees no metadata at all
    for read in (lambda p: read_table(p, "scores"), read_metadata):
        with pytest.raises(SchemaError, match="footer ends after") as err:
            read(scores_file)
        assert str(scores_file) in str(err.value) and "re-run the rule" in str(err.value)


def test_key_value_metadata_skipped_by_the_parser_is_refused(scores_file):
    """A flip of the field header that announces the key-value list: Thrift skips the whole list.

    The footer still parses to its end, and the file would pass for one written without
    digests; the Parquet field id write_table puts on the first column says it was not.
    """
    data = bytearray(scores_file.read_bytes())
    field = data.rfind(b"\x18\x07presdep\x18") - 2  # field 5 (key_value_metadata), a list: 0x19
    assert data[field] == 0x19, data[field - 4 : field + 12]
    data[field] ^= 0x40  # field 9 (a binary), so the list is skipped as of the wrong type
    scores_file.write_bytes(bytes(data))
    assert pq.read_metadata(scores_file).serialized_size == int.from_bytes(data[-8:-4], "little")
    assert not pq.read_metadata(scores_file).metadata
    assert str(schemas._FIELD_ID_BASE) in str(pq.read_metadata(scores_file).schema)
    for read in (lambda p: read_table(p, "scores"), read_metadata):
        with pytest.raises(SchemaError, match="field id but its key-value metadata") as err:
            read(scores_file)
        assert str(scores_file) in str(err.value) and "re-run the rule" in str(err.value)


def _rewrite(path, table, md):
    pq.write_table(table.replace_schema_metadata(md), path, write_page_checksum=True)


def test_changed_data_is_a_content_digest_mismatch(scores_file):
    table = pq.read_table(scores_file)
    md = pq.read_metadata(scores_file).metadata
    changed = pl.from_arrow(table).with_columns(pl.col("score") * 2).to_arrow()
    _rewrite(scores_file, changed, {k: md[k] for k in (METADATA_KEY, DIGEST_KEY, META_DIGEST_KEY)})
    with pytest.raises(SchemaError, match="content digest mismatch") as err:
        read_table(scores_file, "scores")
    msg = str(err.value)
    assert str(scores_file) in msg and "'scores'" in msg and "disk or copy damage" in msg
    assert REBUILD_HINT in msg and "--force" in msg and "delete" not in msg
    assert read_metadata(scores_file)["kind"] == "scores"  # its JSON still matches its own digest


def test_changed_metadata_is_refused_by_both_readers(scores_file):
    table = pq.read_table(scores_file)
    md = dict(pq.read_metadata(scores_file).metadata)
    md[METADATA_KEY] = md[METADATA_KEY].replace(b'"tiny"', b'"huge"')
    del md[b"ARROW:schema"]
    _rewrite(scores_file, table, md)
    with pytest.raises(SchemaError, match="metadata digest mismatch"):
        read_metadata(scores_file)
    with pytest.raises(SchemaError, match="digest mismatch"):
        read_table(scores_file, "scores")


@pytest.mark.parametrize("lost", [DIGEST_KEY, META_DIGEST_KEY, METADATA_KEY])
def test_a_lost_key_is_damage_not_a_legacy_file(scores_file, lost):
    table = pq.read_table(scores_file)
    md = {k: v for k, v in pq.read_metadata(scores_file).metadata.items() if k not in (lost, b"ARROW:schema")}
    _rewrite(scores_file, table, md)
    for read in (lambda p: read_table(p, "scores"), read_metadata):
        with pytest.raises(SchemaError, match=f"{lost.decode()}.* missing") as err:
            read(scores_file)
        assert "re-run the rule" in str(err.value)


def test_file_without_digest_is_read_with_one_warning(tmp_path, caplog):
    """Files from an older presdep (or by hand) are served, with a single warning per file."""
    path = tmp_path / "old.parquet"
    table = schemas._check(scores_table(), "scores", "test")
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: b'{"kind": "scores"}'}), path)
    with caplog.at_level(logging.WARNING, logger=schemas.__name__):
        assert read_table(path, "scores").equals(scores_table())
        assert read_metadata(path) == {"kind": "scores"}
        assert read_table(path, "scores").height == 24
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert str(path) in warnings[0].getMessage() and "no presdep content digest" in warnings[0].getMessage()


@pytest.mark.parametrize("row_group_size", [1, 5, 7, 24, 1000])
def test_digest_does_not_depend_on_row_groups(tmp_path, row_group_size):
    df = scores_table()
    path = tmp_path / "scores.parquet"
    write_table(df, path, "scores", {"model": "tiny"})
    meta_json = _meta_json(path)
    table = schemas._check(df, "scores", str(path))
    md = artifact_metadata(pl.from_arrow(table), meta_json)
    assert md[DIGEST_KEY] == pq.read_metadata(path).metadata[DIGEST_KEY]
    other = tmp_path / f"rg{row_group_size}.parquet"
    pq.write_table(table.replace_schema_metadata(md), other, row_group_size=row_group_size,
                   write_page_checksum=True, data_page_size=64)
    assert pq.read_metadata(other).num_row_groups == -(-24 // row_group_size)
    assert read_table(other, "scores").equals(read_table(path, "scores"))
    assert read_metadata(other) == read_metadata(path)


def test_digest_does_not_depend_on_chunks():
    df = scores_table()
    chunked = pl.concat([df.slice(0, 5), df.slice(5, 11), df.slice(16)], rechunk=False)
    assert chunked.n_chunks("all") != [1] * df.width
    via_arrow = pl.from_arrow(df.to_arrow())
    assert content_digest(chunked, b"{}") == content_digest(df, b"{}") == content_digest(via_arrow, b"{}")


@pytest.mark.parametrize(
    "a, b",
    [
        (pl.DataFrame({"s": ["ab", "c"]}), pl.DataFrame({"s": ["a", "bc"]})),  # boundaries count
        (pl.DataFrame({"s": ["", "x"]}), pl.DataFrame({"s": [None, "x"]})),  # null is not ""
        (pl.DataFrame({"x": [0.0]}), pl.DataFrame({"x": [-0.0]})),  # bits, not equality
        (pl.DataFrame({"x": [0, 1]}), pl.DataFrame({"x": [None, 1]})),  # null is not 0
        (pl.DataFrame({"x": [1]}, schema={"x": pl.Int32}), pl.DataFrame({"x": [1]}, schema={"x": pl.Int64})),
        (pl.DataFrame({"x": [1], "y": [2]}), pl.DataFrame({"y": [2], "x": [1]})),  # column order
        (pl.DataFrame({"x": [1]}), pl.DataFrame({"y": [1]})),  # column name
        (pl.DataFrame({"s": ["ab"], "t": ["c"]}), pl.DataFrame({"s": ["a"], "t": ["bc"]})),
    ],
)
def test_digest_tells_apart_what_reads_differently(a, b):
    """Different tables give different digests, even where DataFrame.equals sees none (0.0 / -0.0, Int32 / Int64)."""
    assert content_digest(a, b"{}") != content_digest(b, b"{}")
    assert content_digest(a, b"{}") != content_digest(a, b"{ }")  # the JSON is covered


def test_other_dtypes_are_digested_exactly():
    """Types outside today's contracts (categorical, temporal, list, binary, ...) still work."""
    import datetime as dt

    def frame(last: int) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "cat": pl.Series(["a", "b", None], dtype=pl.Categorical),
                "when": [dt.datetime(2024, 1, 1), None, dt.datetime(2024, 1, last)],
                "flag": [True, None, False],
                "ids": [[1, 2], [], [last]],
                "blob": [b"x", None, b"\x00" * last],
            }
        )

    a = frame(3)
    assert content_digest(a, b"{}") == content_digest(pl.from_arrow(a.to_arrow()), b"{}")
    assert content_digest(a, b"{}") == content_digest(pl.concat([a.head(1), a.tail(2)], rechunk=False), b"{}")
    assert content_digest(a, b"{}") != content_digest(frame(4), b"{}")
