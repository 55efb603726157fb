"""The cluster path for real: a tiny configuration of the workflow through a local Slurm.

The session fixture (tests/workflow/conftest.py) installs (if missing) and starts a single-node Slurm with
cluster/start-local-slurm.sh and stops exactly the daemons it started. The run
uses the real cluster profile with the test overrides layered on top
(``--profile profiles/slurm --profile profiles/slurm-test``), so every non-local
rule goes through sbatch. The Slurm executor plugin is never in the project's venv
(loading it probes ``scontrol``): like a cluster user's ``make cluster-env``, the
``slurm_snakemake`` fixture builds a venv layered on this one with cluster/slurm-venv.sh.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_utils import planned_jobs, scratch_workflow

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PROFILE = ("--profile", "profiles/slurm", "--profile", "profiles/slurm-test")
CONFIG = ("--configfile", "configs/examples/slurm-tiny.yaml")
TARGET = ("--", "results/table1.csv")
DATASETS = ("tiny_test", "tiny_heldout")
RUN_TIMEOUT = 240


def _slurm_job_ids(work: Path) -> dict[str, str]:
    """{slurm job id: rule or group folder} from the plugin's per-job logs."""
    logs = work / ".snakemake" / "slurm_logs"
    return {p.stem: p.relative_to(logs).parts[0] for p in logs.rglob("*.log") if p.stem.isdigit()}


def _jobcomp_states(jobcomp: Path) -> dict[str, str]:
    states = {}
    for line in jobcomp.read_text().splitlines():
        m = re.search(r"\bJobId=(\d+)\b.*\bJobState=(\S+)", line)
        if m:
            states[m.group(1)] = m.group(2)
    return states


def _running_score_job(deadline: float) -> tuple[str, str]:
    """Wait for a RUNNING score job; return (slurm job id, dataset)."""
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i|%k"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            job_id, _, comment = line.partition("|")
            for ds in DATASETS:
                if comment.startswith("rule_score_") and comment.endswith(ds):
                    return job_id.strip(), ds
        time.sleep(0.2)
    raise AssertionError("no score job reached RUNNING in Slurm")


def _wait_gone(job_id: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-t", "PENDING,RUNNING,COMPLETING", "-o", "%i"], capture_output=True, text=True).stdout
        if not out.strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"Slurm job {job_id} did not end after scancel")


def test_tiny_workflow_runs_through_slurm_and_resumes_after_scancel(local_slurm, slurm_snakemake, tmp_path):
    jobcomp = local_slurm
    work = scratch_workflow(tmp_path)
    exe = slurm_snakemake
    env = {**os.environ, "PATH": f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    started = time.monotonic()

    # 1. Start the real run; cancel one score job while it runs; the run must fail.
    log1 = open(tmp_path / "run1.log", "w")
    run1 = subprocess.Popen(
        ["timeout", str(RUN_TIMEOUT), str(exe), *PROFILE, *CONFIG, *TARGET],
        cwd=work, env=env, stdout=log1, stderr=subprocess.STDOUT,
    )
    try:
        cancelled, cancelled_ds = _running_score_job(time.monotonic() + RUN_TIMEOUT)
        subprocess.run(["scancel", cancelled], check=True)
        _wait_gone(cancelled, time.monotonic() + 60)
        rc1 = run1.wait(timeout=RUN_TIMEOUT)
    finally:
        if run1.poll() is None:
            run1.kill()
        log1.close()
    out1 = (tmp_path / "run1.log").read_text()
    assert rc1 not in (0, 124), f"the run should fail on the cancelled job, got {rc1}:\n{out1[-3000:]}"
    assert cancelled in out1 and "CANCELLED" in out1, out1[-3000:]
    other_ds = next(ds for ds in DATASETS if ds != cancelled_ds)

    # What finished before (or regardless of) the cancel stays; only the cancelled branch is planned.
    done_before = [
        *sorted((work / "resources/datasets/tiny").rglob("*.*")),
        *(work / f"results/{ds}/{name}.parquet" for ds in DATASETS for name in ("candidates", "qrels")),
        work / f"results/scores/bm25/{other_ds}.parquet",
    ]
    assert all(p.is_file() for p in done_before), [str(p) for p in done_before if not p.is_file()]
    assert not (work / f"results/scores/bm25/{cancelled_ds}.parquet").exists()
    mtimes = {p: p.stat().st_mtime_ns for p in done_before}
    dry = subprocess.run([str(exe), "-n", *PROFILE, *CONFIG, *TARGET], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr[-3000:]
    # The cancelled branch's score, and both datasets' t* and metrics: they form one group job
    # (the rules group metrics with the t* it reads, profiles/slurm sizes the group), which waited for the cancelled score.
    assert planned_jobs(dry.stdout + dry.stderr) == {"score": 1, "thresholds": 2, "metrics": 2, "table1": 1}

    # 2. Re-run: completes, redoing nothing that had finished.
    run2 = subprocess.run(
        ["timeout", str(RUN_TIMEOUT), str(exe), *PROFILE, *CONFIG, *TARGET],
        cwd=work, env=env, capture_output=True, text=True,
    )
    out2 = run2.stdout + run2.stderr
    assert run2.returncode == 0, out2[-4000:]
    assert {p: p.stat().st_mtime_ns for p in done_before} == mtimes, "finished outputs were recomputed"
    for ds in DATASETS:
        assert (work / f"results/scores/bm25/{ds}.parquet").is_file()
        assert (work / f"results/metrics/bm25/{ds}.parquet").is_file()
    table = (work / "results/table1.csv").read_text()
    assert table.splitlines()[0].startswith("variant,") and "\nbm25," in table

    # 3. The jobs went through Slurm: the plugin's per-job logs name Slurm job ids,
    #    and Slurm's own completion log has each of them with its final state.
    ids = _slurm_job_ids(work)
    by_rule: dict[str, list[str]] = {}
    for job_id, rule in ids.items():
        by_rule.setdefault(rule, []).append(job_id)
    assert sorted(by_rule) == ["group_small_cpu_metrics_thresholds", "rule_build_fixture", "rule_generate_synthetic",
                               "rule_score"], ids
    # The light jobs of both datasets in one submission, after the cancelled score was redone.
    assert [len(by_rule[r]) for r in ("rule_generate_synthetic", "rule_build_fixture", "rule_score",
                                      "group_small_cpu_metrics_thresholds")] == [1, 2, 3, 1]
    states = _jobcomp_states(jobcomp)
    assert states.get(cancelled) == "CANCELLED", (cancelled, states)
    for job_id in set(ids) - {cancelled}:
        assert states.get(job_id) == "COMPLETED", (job_id, ids[job_id], states.get(job_id))
    assert "localrule table1" in out2, "table1 is a local rule: it must not be submitted"

    # Score jobs asked Slurm for a GPU (the test node has two fake ones).
    last_score = max(by_rule["rule_score"], key=int)
    show = subprocess.run(["scontrol", "show", "job", last_score], capture_output=True, text=True).stdout
    assert "gres:gpu:1" in show or "gres/gpu=1" in show, show

    # 4. light_rules: local (profiles/slurm-light-local, layered last): the light jobs run again
    #    beside Snakemake and nothing more is submitted.
    metrics_files = [work / f"results/metrics/bm25/{ds}.parquet" for ds in DATASETS]
    before = {p: p.stat().st_mtime_ns for p in metrics_files}
    run3 = subprocess.run(
        ["timeout", str(RUN_TIMEOUT), str(exe), *PROFILE, "--profile", "profiles/slurm-light-local", *CONFIG,
         "--forcerun", "metrics", "thresholds", *TARGET],
        cwd=work, env=env, capture_output=True, text=True,
    )
    out3 = run3.stdout + run3.stderr
    assert run3.returncode == 0, out3[-4000:]
    assert out3.count("localrule metrics:") == 2 and out3.count("localrule thresholds:") == 2, out3[-4000:]
    assert _slurm_job_ids(work) == ids, "a light job was submitted"
    assert all(p.stat().st_mtime_ns != before[p] for p in metrics_files)
    print(f"Slurm test wall time: {time.monotonic() - started:.0f} s")


# presdep-slurm (cluster/plugins): the Slurm plugin's submission, a group's members forked from the worker.
WORKER_EXECUTOR = (
    "--executor", "presdep-slurm",
    # The Slurm plugin's settings of profiles/slurm-test, under this plugin's prefix.
    "--presdep-slurm-status-command", "squeue", "--presdep-slurm-init-seconds-before-status-checks", "5",
    "--presdep-slurm-keep-successful-logs",
    # Both score jobs in one group job of one (fake) GPU per member and one core each: two cores in all,
    # one task (tasks_per_gpu 0: the Slurm plugin would ask one task per GPU, each with both cores).
    "--groups", "score=models", "--group-components", "models=2", "--set-threads", "score=1",
    "--set-resources", "score:gpu=1", "score:cpus_per_gpu=0", "score:tasks_per_gpu=0",
)


def test_presdep_slurm_runs_a_groups_members_side_by_side_in_the_worker(local_slurm, slurm_snakemake, tmp_path):
    exe = slurm_snakemake
    env = {**os.environ, "PATH": f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    (tmp_path / "slurm").mkdir()
    work = scratch_workflow(tmp_path / "slurm")
    run = subprocess.run(["timeout", str(RUN_TIMEOUT), str(exe), *PROFILE, *WORKER_EXECUTOR, *CONFIG, *TARGET],
                         cwd=work, env=env, capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]

    logs = work / ".snakemake" / "slurm_logs"
    (group_log,) = (logs / "group_models_score").glob("*.log")
    inner = group_log.read_text()
    # Inside the allocation: one Snakemake with the worker executor, one worker, both members forked
    # from it and started before either finished (the Slurm plugin's jobstep runs them one at a time).
    assert "--executor presdep-worker" in inner and "slurm-jobstep" not in inner, inner[:3000]
    assert inner.count("presdep worker: started") == 1, inner
    first_end = inner.index("Finished jobid")
    assert inner.count("rule score:", 0, first_end) == 2, inner
    assert "runs in a fresh process" not in inner, inner
    # A job of its own runs as the Slurm plugin runs it.
    for single in (logs / "rule_build_fixture").rglob("*.log"):
        assert "--executor slurm-jobstep" in single.read_text(), single
    # Slurm granted the group both GPUs its members asked for.
    show = subprocess.run(["scontrol", "show", "job", group_log.stem], capture_output=True, text=True).stdout
    assert "JobState=COMPLETED" in show and re.search(r"gres[:/]gpu[:=]2", show), show

    # The same results as a local run of the same config.
    (tmp_path / "local").mkdir()
    local = scratch_workflow(tmp_path / "local")
    ran = subprocess.run(["timeout", str(RUN_TIMEOUT), str(Path(sys.executable).with_name("snakemake")), "--cores", "2",
                          *CONFIG, *TARGET], cwd=local, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    for name in ("results/table1.csv", *(f"results/metrics/bm25/{ds}.parquet" for ds in DATASETS)):
        assert (work / name).read_bytes() == (local / name).read_bytes(), name
