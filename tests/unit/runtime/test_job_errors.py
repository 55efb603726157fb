"""A job's input error ends it as one line naming the config key; a bug keeps its traceback."""

import subprocess
import sys
import textwrap

from presdep.contracts.errors import InputFormatError, SchemaError
from presdep.runtime.job_errors import MESSAGE_LIMIT, describe, key_for

KEYS = {"data/run.txt": "datasets.mine.candidates.run", "data/beir": "datasets.mine.candidates.corpus.path"}


def test_the_key_is_found_for_the_file_or_the_folder_that_holds_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert key_for("data/run.txt", KEYS) == "datasets.mine.candidates.run"
    assert key_for(tmp_path / "data/run.txt", KEYS) == "datasets.mine.candidates.run", "absolute or relative"
    assert key_for("data/beir/corpus.jsonl.gz", KEYS) == "datasets.mine.candidates.corpus.path"
    assert key_for("data/beirx/corpus.jsonl", KEYS) is None, "a sibling folder is not inside"
    assert key_for("elsewhere.txt", KEYS) is None and key_for(None, KEYS) is None


def test_input_errors_become_one_line_and_bugs_do_not():
    exc = InputFormatError("data/run.txt", "line 3", "expected 6 columns")
    assert describe(exc, KEYS) == "datasets.mine.candidates.run: data/run.txt, line 3: expected 6 columns"
    missing = FileNotFoundError(2, "No such file or directory", "data/beir/queries.jsonl")
    assert describe(missing, KEYS) == "datasets.mine.candidates.corpus.path: data/beir/queries.jsonl: No such file or directory"
    assert describe(SchemaError("results/x.parquet: damaged")) == "results/x.parquet: damaged"
    assert describe(ZeroDivisionError("bug")) is None and describe(KeyError("k")) is None
    long = describe(InputFormatError("f", "line 1", "x" * 5_000_000))
    assert len(long) < MESSAGE_LIMIT + 40 and long.endswith("(5,000,011 characters)")


def _job(tmp_path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        from presdep.contracts.errors import InputFormatError
        from presdep.runtime.logs import log_to_file
        log_to_file({str(tmp_path / "job.log")!r}, input_keys={{"own/run.txt": "datasets.mine.candidates.run"}})
        {body}
    """))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_job_that_hits_an_input_error_prints_one_line_and_exits_1(tmp_path):
    proc = _job(tmp_path, 'raise InputFormatError("own/run.txt", "line 2", "rank \'x\' must be an integer")')
    assert proc.returncode == 1
    line = "presdep: input error: datasets.mine.candidates.run: own/run.txt, line 2: rank 'x' must be an integer\n"
    assert proc.stderr == line, "the console: the one line, no traceback"
    log = (tmp_path / "job.log").read_text()
    assert log.endswith(line) and "Traceback" not in log


def test_a_bug_in_a_job_keeps_its_traceback(tmp_path):
    proc = _job(tmp_path, "1 / 0")
    assert proc.returncode == 1
    assert "Traceback" in (tmp_path / "job.log").read_text() and "ZeroDivisionError" in (tmp_path / "job.log").read_text()
