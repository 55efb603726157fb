import signal
import subprocess
import sys
import textwrap

import polars as pl
import pytest

from presdep.contracts import schemas


def qrels_frame():
    return pl.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["a", "b"], "relevance": [2, 0]})


def test_round_trip_keeps_types_and_provenance(tmp_path):
    path = tmp_path / "qrels.parquet"
    schemas.write_table(qrels_frame(), path, "qrels", {"k1": 0.9}, dataset="dl19")
    back = schemas.read_table(path, "qrels")
    assert back.schema["relevance"] == pl.Int32
    assert back.to_dicts() == qrels_frame().to_dicts()
    meta = schemas.read_metadata(path)
    assert meta["kind"] == "qrels" and meta["params"] == {"k1": 0.9} and meta["dataset"] == "dl19"
    assert meta["presdep_version"]


def test_missing_column_names_file_and_column(tmp_path):
    with pytest.raises(schemas.SchemaError, match=r"qrels\.parquet.*relevance"):
        schemas.write_table(qrels_frame().drop("relevance"), tmp_path / "qrels.parquet", "qrels")
    assert not list(tmp_path.iterdir()), "nothing may be left behind"


def test_wrong_type_names_column(tmp_path):
    bad = qrels_frame().with_columns(pl.lit("high").alias("relevance"))
    with pytest.raises(schemas.SchemaError, match="relevance"):
        schemas.write_table(bad, tmp_path / "q.parquet", "qrels")


def test_duplicate_key_is_refused(tmp_path):
    dup = pl.concat([qrels_frame(), qrels_frame().head(1)])
    with pytest.raises(schemas.SchemaError, match="duplicate qrels key"):
        schemas.write_table(dup, tmp_path / "q.parquet", "qrels")


def test_null_in_required_column(tmp_path):
    bad = pl.DataFrame({"query_id": ["q1", None], "doc_id": ["a", "b"], "relevance": [1, 0]})
    with pytest.raises(schemas.SchemaError, match="query_id.*null at row 1"):
        schemas.write_table(bad, tmp_path / "q.parquet", "qrels")


def test_read_validates_against_contract(tmp_path):
    path = tmp_path / "x.parquet"
    pl.DataFrame({"query_id": ["q"], "doc_id": ["d"]}).write_parquet(path)
    with pytest.raises(schemas.SchemaError, match=r"x\.parquet.*relevance"):
        schemas.read_table(path, "qrels")


def test_not_parquet_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(schemas.SchemaError, match="broken.parquet: not a readable Parquet"):
        schemas.read_table(path, "qrels")


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_written_files_get_the_umask_mode_not_a_private_one(tmp_path, umask, mode):
    """Atomic writes go through a private temporary file; the result still gets the usual mode."""
    code = textwrap.dedent(
        f"""
        import os, sys
        os.umask({umask})
        import polars as pl
        from presdep.contracts import schemas
        schemas.write_table(pl.DataFrame({{"query_id": ["q"], "doc_id": ["d"], "relevance": [1]}},
                                         schema={{"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}}),
                            sys.argv[1] + "/q.parquet", "qrels")
        schemas.write_text_atomic(sys.argv[1] + "/t.md", "x")
        """
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    for name in ("q.parquet", "t.md"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode, name


def test_killed_writer_leaves_old_file_intact(tmp_path):
    """A writer killed mid-way leaves either the old file or the new one, never a torn one."""
    path = tmp_path / "scores.parquet"
    schemas.write_table(qrels_frame(), path, "qrels")
    before = path.read_bytes()
    script = textwrap.dedent(
        f"""
        import os, signal, polars as pl, pyarrow.parquet as pq
        from presdep.contracts import schemas
        real = pq.write_table
        def slow(table, where, **kw):
            real(table, where, **kw)
            os.kill(os.getpid(), signal.SIGKILL)  # die after the temp file, before the rename
        pq.write_table = slow
        schemas.pq.write_table = slow
        df = pl.DataFrame({{"query_id": ["z"], "doc_id": ["z"], "relevance": [3]}})
        schemas.write_table(df, {str(path)!r}, "qrels")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script])
    assert proc.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    assert schemas.read_table(path, "qrels").height == 2
