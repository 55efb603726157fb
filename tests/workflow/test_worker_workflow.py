"""The tiny default run through the warm worker (``--executor presdep-worker``), killed with kill -9
and resumed: the kill takes the worker and its jobs with it, the resumed run ends with the outputs
fresh processes give, and benchmark files still measure the job."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from workflow_utils import TINY_DEFAULT, snakemake, tiny_default_workflow

WORKER = ("--executor", "presdep-worker")


# What differs between ANY two runs of one commit, with the worker or without (README,
# Reproducibility): timings alone (benchmark files; the training logs' `seconds` and the digests
# taken over them). Scores carry no read-cache counters, and the read cache's files do not depend
# on which of two concurrent jobs read a shared prompt first (one job shard per job).
def _without_timings(value):
    """A training log without its times and without its own digest (taken over those times)."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if "seconds" not in k and k != "presdep_sha256"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _training_log(path: Path):
    table = pq.read_table(path)
    meta = dict(table.schema.metadata or {})
    for digest in (b"presdep_sha256", b"presdep_meta_sha256"):  # digests over the timings
        meta.pop(digest, None)
    data = table.drop_columns([c for c in table.column_names if c == "seconds"]).replace_schema_metadata(None)
    return data.to_pylist(), meta


def _outputs(work: Path) -> dict[str, object]:
    """Every output (benchmarks aside) as bytes; the training runs' logs without their timings."""
    out: dict[str, object] = {}
    for path in sorted((work / "results").rglob("*")):
        rel = path.relative_to(work).as_posix()
        if not path.is_file() or rel.startswith("results/benchmarks/"):
            continue
        data = path.read_bytes()
        if rel.startswith("results/models/") and path.suffix == ".parquet":
            out[rel] = _training_log(path)
        elif rel.startswith("results/models/") and path.suffix == ".json":
            out[rel] = _without_timings(json.loads(data))
        else:
            out[rel] = data
    return out


def _read_cache(work: Path) -> dict[str, bytes]:
    """The read cache's identity files and shards (claims aside: a killed job's may be left), by path."""
    root = work / "resources/read_cache"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and (p.suffix == ".parquet" or p.name == "identity.json")}


def _worker_pids(log: Path) -> list[int]:
    return [int(p) for p in re.findall(r"presdep worker: started \(pid (\d+)\)", log.read_text(errors="replace"))]


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class KilledAndResumed:
    work: Path
    logs: str  # both runs'
    jobs_at_the_kill: list[int]
    outlived_the_kill: list[int]
    table_before_resume: bool


@pytest.fixture(scope="module")
def worker_run(tmp_path_factory, smollm2_model_dir) -> KilledAndResumed:
    """The tiny default through the worker, killed with SIGKILL while the worker runs a model job
    (the first scores written, the run not done), then resumed as `make resume` does (unlock, the
    same command again): one run for every test below, so the kill is part of what they check."""
    root = tmp_path_factory.mktemp("tiny-worker")
    work = tiny_default_workflow(root, smollm2_model_dir)
    log = root / "killed.log"
    exe = Path(sys.executable).with_name("snakemake")
    env = dict(os.environ, PATH=f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with open(log, "w") as out:
        proc = subprocess.Popen([str(exe), "--cores", "2", "--configfile", TINY_DEFAULT, *WORKER],
                                cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 900
    jobs: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        pids = _worker_pids(log)
        jobs = _children(pids[0]) if pids else []
        if jobs and (work / "results/scores/off_the_shelf/synthetic.parquet").exists():
            break
        time.sleep(0.05)
    assert proc.poll() is None and jobs, "the run ended, or ran no job in the worker, before the kill"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    watched = (_worker_pids(log)[0], *jobs)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in watched):
        time.sleep(0.05)
    outlived = [p for p in watched if _alive(p)]
    table_before = (work / "results/table1.csv").exists()
    snakemake(work, "--unlock", "--configfile", TINY_DEFAULT)
    resumed = snakemake(work, "--cores", "2", "--configfile", TINY_DEFAULT, *WORKER, timeout=1500)
    return KilledAndResumed(work, log.read_text(errors="replace") + resumed.stdout + resumed.stderr,
                            list(jobs), outlived, table_before)


@pytest.mark.slow
def test_kill_9_of_snakemake_takes_the_worker_and_its_jobs(worker_run):
    assert worker_run.jobs_at_the_kill and worker_run.outlived_the_kill == []
    assert not worker_run.table_before_resume


@pytest.mark.slow
def test_the_worker_gives_the_bytes_fresh_processes_give(worker_run, tiny_default_run):
    """Killed, resumed and forked from the worker: the outputs of an uninterrupted fresh-process run."""
    work, log = worker_run.work, worker_run.logs
    assert log.count("presdep worker: started") == 2 and "runs in a fresh process" not in log
    fresh, warm = _outputs(tiny_default_run), _outputs(work)
    assert any(p.startswith("results/scores/") for p in fresh) and "results/table1.csv" in fresh
    assert sorted(warm) == sorted(fresh)
    assert [p for p in fresh if warm[p] != fresh[p]] == []
    # Byte for byte: all but the training logs (tables, metrics, thresholds, scores, answers, ...).
    assert all(isinstance(fresh[p], bytes) for p in fresh if p.startswith(("results/metrics/", "results/table",
                                                                             "results/scores/")))
    # The read cache's files too: one job shard per job that read through it, no part left over.
    cache = _read_cache(tiny_default_run)
    shards = [p for p in cache if p.endswith(".parquet")]
    assert shards and not [p for p in shards if Path(p).name.startswith("part-")]
    assert sorted(_read_cache(work)) == sorted(cache)
    assert [p for p in cache if _read_cache(work)[p] != cache[p]] == []


@pytest.mark.slow
def test_benchmark_files_measure_the_forked_job(worker_run, tiny_default_run):
    work = worker_run.work
    rows = {}
    for run, root in (("warm", work), ("fresh", tiny_default_run)):
        with open(root / "results/benchmarks/score/off_the_shelf/synthetic.tsv", newline="") as f:
            rows[run] = next(csv.DictReader(f, delimiter="\t"))
    warm, fresh = rows["warm"], rows["fresh"]
    # The forked job shares torch's pages with the worker, but they are resident in it: its peak RSS
    # is a model job's, not a client's. Its CPU is the child's own: never the 0 (or NA) of a record
    # that saw no process; not a forward pass's worth either, since after the resume the job may be
    # answered whole by the read cache (polars, presdep and its Parquet reads: tenths of a second).
    assert float(warm["max_rss"]) > 300 and float(fresh["max_rss"]) > 300
    assert float(warm["cpu_time"]) > 0.1
    # The fresh job also paid its imports; the forked one did not.
    assert float(warm["cpu_time"]) < float(fresh["cpu_time"])


