"""A model job in a fresh process against the same job forked from the warm worker.

    python benchmarks/worker.py [--pairs 5]

Builds the tiny stand-in of Qwen3-4B (presdep.rehearsal.tiny_models) and a job script that loads
it with transformers, reads one prompt and writes its last-token logits to Parquet: a score job's
shape at the smallest size, so what differs is what a job pays besides its work. Runs it A B A B
...: A as Snakemake runs a script (``python job.py``), B through one worker (presdep.runtime.worker).
Prints each one's median CPU and wall seconds (the children's rusage for A, the child's own wait4
accounting for B), the median of the pairwise ratios B/A, the worker's one-off import cost, and
whether every run wrote the same logits bit for bit.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
model_dir, out = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
ids = tok("Passage [1]: the quick brown fox. Grade:", return_tensors="pt").input_ids
with torch.inference_mode():
    logits = model(ids).logits[0, -1].tolist()
pq.write_table(pa.table({"logit": logits}), out)
"""


def _children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()
    from presdep.rehearsal.tiny_models import build_repo
    from presdep.runtime.worker.client import WorkerClient

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_repo("qwen3_4b", tmp / "model")
        job = tmp / "job.py"
        job.write_text(JOB)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        worker = WorkerClient(env=env)
        t0 = time.monotonic()
        preload_s = worker.wait_ready()
        ready_wall = time.monotonic() - t0
        fresh, warm, digests = [], [], set()
        try:
            for i in range(args.pairs):
                out = tmp / f"fresh{i}.parquet"
                cpu, t = _children_cpu(), time.monotonic()
                subprocess.run([sys.executable, str(job), str(model), str(out)], env=env, check=True, cwd=tmp)
                fresh.append((_children_cpu() - cpu, time.monotonic() - t))
                digests.add(hashlib.sha256(out.read_bytes()).hexdigest())
                # The job script reads sys.argv: the worker runs it as Snakemake's preamble would,
                # so give it its arguments through a wrapper that sets them.
                wrapper = tmp / f"warm{i}.py"
                out = tmp / f"warm{i}.parquet"
                wrapper.write_text(f"import sys; sys.argv[1:] = [{str(model)!r}, {str(out)!r}]\n" + JOB)
                t = time.monotonic()
                end = worker.run(str(wrapper), str(tmp), env)
                assert end.exit == 0, f"the worker's job failed ({end.exit})"
                warm.append((end.cpu_s, time.monotonic() - t))
                digests.add(hashlib.sha256(out.read_bytes()).hexdigest())
        finally:
            worker.stop()
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    ratios = [w[0] / f[0] for f, w in zip(fresh, warm)]
    print(f"fresh process : median {med(fresh, 0):.2f} CPU-s, {med(fresh, 1):.2f} s wall per job ({args.pairs} jobs)")
    print(f"warm worker   : median {med(warm, 0):.2f} CPU-s, {med(warm, 1):.2f} s wall per job ({args.pairs} jobs)")
    print(f"ratio worker/fresh (CPU, median of pairs): {statistics.median(ratios):.3f}")
    print(f"worker start-up, once per run: {preload_s:.2f} CPU-s of imports, {ready_wall:.2f} s until ready")
    print(f"logits bit-identical across all {2 * args.pairs} runs: {len(digests) == 1}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
