"""Snakemake's own cost of scheduling a large plan, per scheduler setting, on a toy of the plan's shape.

    python benchmarks/scheduler.py [--jobs 500] [--repeats 3] [--cores 2]

Writes, in a scratch folder, a Snakefile with the paper plan's fan-out and fan-in (``--jobs``
score-like jobs, one metrics-like job after each, one table after all), each job a one-line
shell command, and runs it to the end once per setting and repeat: Snakemake's default
scheduler (ILP where a solver is installed), ``--scheduler greedy``, and greedy with
``--scheduler-subsample 20`` (what profiles/slurm and the rehearsal use). Prints the median
CPU seconds (the whole run: Snakemake plus its trivial jobs, from the children's rusage) and
wall seconds of each, and each setting's ratio to the default, measured in the same process.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = {
    "default": [],
    "greedy": ["--scheduler", "greedy"],
    "greedy+subsample20": ["--scheduler", "greedy", "--scheduler-subsample", "20"],
}

TOY = """N = {n}
rule all:
    input: "table.txt"
rule score:
    output: "s/{{i}}.txt"
    shell: "echo {{wildcards.i}} > {{output}}"
rule metrics:
    input: "s/{{i}}.txt"
    output: "m/{{i}}.txt"
    shell: "cat {{input}} > {{output}}"
rule table:
    input: expand("m/{{i}}.txt", i=range(N))
    output: "table.txt"
    shell: "cat {{input}} > {{output}}"
"""


def _run(folder: Path, snakemake: str, cores: int, extra: list[str]) -> tuple[float, float]:
    for name in ("s", "m", ".snakemake"):
        shutil.rmtree(folder / name, ignore_errors=True)
    (folder / "table.txt").unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([snakemake, "--cores", str(cores), "-q", *extra], cwd=folder, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500, help="score-like jobs (the plan has 2 x jobs + 2)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")))
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="scheduler-bench-"))
    try:
        (folder / "Snakefile").write_text(TOY.format(n=args.jobs))
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in SETTINGS}
        for _ in range(args.repeats):  # interleaved: drift of the machine's speed hits every setting alike
            for name, extra in SETTINGS.items():
                samples[name].append(_run(folder, args.snakemake, args.cores, extra))
        base_cpu = statistics.median(c for c, _ in samples["default"])
        base_wall = statistics.median(w for _, w in samples["default"])
        print(f"{2 * args.jobs + 2} jobs, {args.cores} cores, median of {args.repeats}")
        print(f"{'setting':<20} {'cpu s':>8} {'wall s':>8} {'cpu/default':>12} {'wall/default':>13}")
        for name, runs in samples.items():
            cpu, wall = statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs)
            print(f"{name:<20} {cpu:8.2f} {wall:8.2f} {cpu / base_cpu:12.3f} {wall / base_wall:13.3f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
