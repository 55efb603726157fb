"""Benchmark: a mock run of the 300 public tasks, and the stability analysis of 5 run reports.

Prints the wall time of (1) one mock run of all 300 tasks (answers, grading, report
written), and (2) a 2,000-resample ``presdep stability`` analysis of 5 reports (three
mock models, two of them with a repeated run), which should stay under 10 s.

    python benchmarks/bench.py [--resamples 2000] [--out results/bench]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from presdep.bench import core


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args()
    tasks = core.load_split()

    start = time.perf_counter()
    first = core.run("mock", tasks, out=args.out, seed=1, run=0, overwrite=True)  # a timing run: replace the last
    run_s = time.perf_counter() - start
    paths = [first["path"]] + [core.run("mock", tasks, out=args.out, seed=s, run=r, overwrite=True)["path"]
                               for s, r in [(1, 1), (2, 0), (2, 1), (3, 0)]]

    start = time.perf_counter()
    res = core.stability(paths, resamples=args.resamples, seed=4401)
    stab_s = time.perf_counter() - start

    print(f"mock run, {len(tasks)} tasks: {run_s:.2f} s")
    print(f"stability, {len(paths)} reports x {res['sharedRows']} rows ({res['sharedItems']} items), "
          f"{args.resamples} resamples: {stab_s:.2f} s (target < 10 s)")
    print("P(first):", {m: round(p, 3) for m, p in res["probabilityFirst"].items()})


if __name__ == "__main__":
    main()
