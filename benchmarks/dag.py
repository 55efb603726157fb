"""Dry-run cost of the paper matrix beside a bare Snakefile with the same job graph.

    python benchmarks/dag.py [--configfile configs/paper.yaml] [--repeats 3]
                             [--with-plugin .venv-slurm/bin/snakemake]

1. Dry-runs the workflow (`snakemake -n --configfile C -- results/table1.csv`) in a
   scratch copy of the repository and parses its job list: rule, inputs, outputs.
2. Writes, in the same run, a bare Snakefile with the same job-graph shape: one rule per
   workflow rule, one job per workflow job (output `bare/<rule>/<jobid>`), each job's
   inputs the outputs of the jobs it depends on, no config, no validation, no params.
3. Times `snakemake --version` (start-up), the workflow's dry run and the bare dry run
   (median of --repeats each) and prints the ratio workflow / bare.

With --with-plugin (the launcher of a venv that has the Slurm executor plugin, e.g. from
`make cluster-env`), the same three timings are taken with it: loading the plugin runs
`scontrol show config`, which waits up to 10 s where Slurm's client is installed but no
controller answers. Nothing is computed; run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "rules", "scripts", "workflow_config.yaml", "configs", "profiles", "envs")
_JOB_START = re.compile(r"^(?:local)?rule (\w+):$")
_FIELD = re.compile(r"^    (input|output|jobid): (.*)$")


def parse_jobs(dry_run_output: str) -> list[dict]:
    """[{rule, jobid, input: [...], output: [...]}] from Snakemake's dry-run job list."""
    jobs, job = [], None
    for line in dry_run_output.splitlines():
        m = _JOB_START.match(line)
        if m:
            job = {"rule": m.group(1), "input": [], "output": []}
            jobs.append(job)
            continue
        m = _FIELD.match(line)
        if job is not None and m:
            key, value = m.groups()
            job[key] = value.strip() if key == "jobid" else [p.strip() for p in value.split(", ") if p.strip()]
    return jobs


def job_graph(jobs: list[dict]) -> dict[str, dict]:
    """{jobid: {rule, deps: [jobid]}}: a dependency is a job that writes one of the inputs."""
    producer = {path: j["jobid"] for j in jobs for path in j["output"]}
    return {
        j["jobid"]: {"rule": j["rule"], "deps": sorted({producer[p] for p in j["input"] if p in producer} - {j["jobid"]})}
        for j in jobs
    }


def bare_snakefile(graph: dict[str, dict], target_ids: list[str]) -> str:
    """A Snakefile with the same rules, jobs and edges, and nothing else (deps in graph.json)."""
    rules = sorted({g["rule"] for g in graph.values()})
    targets = [f"bare/{graph[t]['rule']}/{t}" for t in target_ids]
    out = [
        "import json",
        'GRAPH = json.load(open("graph.json"))',
        "",
        "def deps(wc):",
        '    return [f"bare/{GRAPH[d][\'rule\']}/{d}" for d in GRAPH[wc.key]["deps"]]',
        "",
        "rule all:",
        f"    input: {targets!r}",
        "",
    ]
    for rule in rules:
        out += [f"rule {rule}:", f'    output: "bare/{rule}/{{key}}"', "    input: deps",
                '    shell: "touch {output}"', ""]
    return "\n".join(out)


def _timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}) in {cwd}:\n{proc.stderr[-4000:]}")
    return elapsed, proc


def _median(cmd: list[str], cwd: Path, repeats: int) -> float:
    return statistics.median(_timed(cmd, cwd)[0] for _ in range(repeats))


def job_total(output: str) -> int:
    """The 'total' row of Snakemake's dry-run job stats."""
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "total" and parts[1].isdigit():
            return int(parts[1])
    raise RuntimeError(f"no job stats in the dry-run output:\n{output[-3000:]}")


def measure(exe: str, work: Path, bare: Path, configfile: str, target: str, repeats: int) -> dict[str, float]:
    return {
        "startup_s": _median([exe, "--version"], work, repeats),
        "workflow_s": _median([exe, "-n", "--configfile", configfile, "--", target], work, repeats),
        "bare_s": _median([exe, "-n", "--cores", "1"], bare, repeats),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", default="configs/paper.yaml")
    ap.add_argument("--target", default="results/table1.csv")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")),
                    help="launcher without the Slurm plugin (default: this venv's)")
    ap.add_argument("--with-plugin", help="launcher of a venv with the Slurm executor plugin (e.g. .venv-slurm/bin/snakemake)")
    ap.add_argument("--workdir", type=Path, default=REPO, help="a workflow checkout (default: this one)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="presdep-dag-") as tmp:
        work, bare = Path(tmp) / "work", Path(tmp) / "bare"
        work.mkdir()
        bare.mkdir()
        for part in WORKFLOW_PARTS:  # a scratch copy: the dry runs leave .snakemake/ behind
            src = args.workdir / part
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, work / part)
        if not (work / args.configfile).exists():
            shutil.copy2(args.workdir / args.configfile, work / Path(args.configfile).name)
            args.configfile = Path(args.configfile).name

        _, proc = _timed([args.snakemake, "-n", "--configfile", args.configfile, "--", args.target], work)
        text = proc.stdout + proc.stderr
        jobs = parse_jobs(text)
        if len(jobs) != job_total(text):
            raise RuntimeError(f"parsed {len(jobs)} jobs, the dry run reports {job_total(text)}")
        graph = job_graph(jobs)
        needed = {d for g in graph.values() for d in g["deps"]}
        targets = [j for j in graph if j not in needed]  # sinks: what the target pulls in
        (bare / "graph.json").write_text(json.dumps({k: {"rule": g["rule"], "deps": g["deps"]} for k, g in graph.items()}))
        (bare / "Snakefile").write_text(bare_snakefile(graph, targets))
        _, bare_proc = _timed([args.snakemake, "-n", "--cores", "1"], bare)
        bare_jobs = job_total(bare_proc.stdout + bare_proc.stderr) - 1  # minus its `all`
        edges = sum(len(g["deps"]) for g in graph.values())
        if bare_jobs != len(jobs):
            raise RuntimeError(f"the bare DAG has {bare_jobs} jobs, the workflow {len(jobs)}")

        runs = {"without plugin": measure(args.snakemake, work, bare, args.configfile, args.target, args.repeats)}
        if args.with_plugin:
            runs["with Slurm plugin"] = measure(args.with_plugin, work, bare, args.configfile, args.target, args.repeats)

    per_rule: dict[str, int] = {}
    for g in graph.values():
        per_rule[g["rule"]] = per_rule.get(g["rule"], 0) + 1
    print(f"{args.configfile}: {len(jobs)} jobs, {edges} edges, {len(per_rule)} rules")
    for rule, n in sorted(per_rule.items(), key=lambda kv: -kv[1]):
        print(f"  {rule:<24} {n:>6}")
    print(f"\n{'launcher':<18} {'start-up s':>10} {'workflow -n s':>13} {'bare -n s':>9} {'ratio':>6} {'ratio beyond start-up':>22}")
    for name, r in runs.items():
        beyond = (r["workflow_s"] - r["startup_s"]) / max(r["bare_s"] - r["startup_s"], 1e-9)
        print(f"{name:<18} {r['startup_s']:>10.2f} {r['workflow_s']:>13.2f} {r['bare_s']:>9.2f} "
              f"{r['workflow_s'] / r['bare_s']:>6.2f} {beyond:>22.2f}")
    print(f"(median of {args.repeats} runs each; bare = the same job graph with no config, params or input functions beyond its edges)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
