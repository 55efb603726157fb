"""DAG size and dry-run time of the paper matrix, and of 2x and 4x as many datasets.

    python benchmarks/dag.py [--configfile configs/paper.yaml] [--repeats 3] [--scales 1 2 4]

Each scaled config duplicates every dataset entry under a new name (written to a
temporary folder), so the job count grows with the datasets while everything else
stays fixed. Prints jobs and the median wall time of `snakemake -n` per scale, with
ratios to the 1x case. Run from the repository root; nothing is computed.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def scaled_config(config: dict, factor: int) -> dict:
    """The config with each dataset repeated ``factor`` times under distinct names."""
    out = copy.deepcopy(config)
    datasets = {}
    for name, spec in config["datasets"].items():
        datasets[name] = spec
        for i in range(1, factor):
            datasets[f"{name}-x{i}"] = copy.deepcopy(spec)
    out["datasets"] = datasets
    return out


def job_count(output: str) -> int:
    """The 'total' row of Snakemake's dry-run job stats."""
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "total" and parts[1].isdigit():
            return int(parts[1])
    raise RuntimeError(f"no job stats in the dry-run output:\n{output[-3000:]}")


def dry_run(configfile: Path, target: str, workdir: Path) -> tuple[int, float]:
    exe = Path(sys.executable).with_name("snakemake")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(exe), "-n", "--configfile", str(configfile), "--", target],
        cwd=workdir, capture_output=True, text=True, timeout=600,
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"dry run of {configfile} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return job_count(proc.stdout + proc.stderr), elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", default="configs/paper.yaml")
    ap.add_argument("--target", default="results/table1.csv")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--workdir", type=Path, default=REPO, help="a workflow checkout (default: this one)")
    args = ap.parse_args(argv)

    base = yaml.safe_load((args.workdir / args.configfile).read_text())
    rows = []
    with tempfile.TemporaryDirectory(prefix="presdep-dag-") as tmp:
        for factor in args.scales:
            path = Path(tmp) / f"x{factor}.yaml"
            path.write_text(yaml.safe_dump(scaled_config(base, factor), sort_keys=False))
            runs = [dry_run(path, args.target, args.workdir) for _ in range(args.repeats)]
            counts = {n for n, _ in runs}
            if len(counts) != 1:
                raise RuntimeError(f"x{factor}: job count changed between runs: {counts}")
            rows.append((factor, len(base["datasets"]) * factor, counts.pop(), statistics.median(t for _, t in runs)))

    _, _, jobs1, t1 = rows[0]
    print(f"{'scale':>5} {'datasets':>8} {'jobs':>6} {'dry-run s':>9} {'jobs/1x':>7} {'time/1x':>7}")
    for factor, n_ds, jobs, secs in rows:
        print(f"{factor:>4}x {n_ds:>8} {jobs:>6} {secs:>9.2f} {jobs / jobs1:>7.2f} {secs / t1:>7.2f}")
    print(f"(median of {args.repeats} runs of `snakemake -n` each; {args.configfile})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
