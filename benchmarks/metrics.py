"""Benchmark: vectorised tau-PSI vs a scipy.stats.kendalltau loop, and compute_metrics end to end.

    python benchmarks/metrics.py [--queries 5000] [--candidates 100] [--presentations 10]

Random scores (no ties) for Q queries x n candidates x M presentations. The scipy
loop runs on a subsample of queries and is extrapolated linearly to all Q (each
query costs the same M(M-1)/2 calls on equal-sized inputs); the output says so.
compute_metrics is timed on a scores table with a canonical presentation, M
random-shuffle presentations with positions, and random qrels (10 judged docs
per query, grades 0..3).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time

import numpy as np
import polars as pl
import scipy.stats

from presdep.metrics.compute import compute_metrics
from presdep.metrics.instability import tau_psi


def scipy_loop(scores: np.ndarray) -> np.ndarray:
    out = np.empty(scores.shape[0])
    m = scores.shape[1]
    for q, block in enumerate(scores):
        taus = [scipy.stats.kendalltau(block[a], block[b]).statistic for a, b in itertools.combinations(range(m), 2)]
        out[q] = np.clip((1 - np.mean(taus)) / 2, 0, 1)
    return out


def scores_table(scores: np.ndarray, canonical: np.ndarray, rng: np.random.Generator) -> pl.DataFrame:
    q, m, n = scores.shape
    qids = np.repeat(np.array([f"q{i}" for i in range(q)]), n)
    dids = np.tile(np.array([f"d{j}" for j in range(n)]), q)
    parts = [pl.DataFrame({"query_id": qids, "doc_id": dids, "perturbation": "canonical", "presentation": 0,
                           "position": np.tile(np.arange(n), q), "score": canonical.ravel()})]
    for p in range(m):
        pos = rng.permuted(np.tile(np.arange(n), (q, 1)), axis=1).ravel()
        parts.append(pl.DataFrame({"query_id": qids, "doc_id": dids, "perturbation": "random_shuffle",
                                   "presentation": p, "position": pos, "score": scores[:, p].ravel()}))
    return pl.concat(parts)


def random_qrels(q: int, n: int, rng: np.random.Generator, judged: int = 10) -> pl.DataFrame:
    docs = np.array([rng.choice(n, judged, replace=False) for _ in range(q)])
    return pl.DataFrame({
        "query_id": np.repeat([f"q{i}" for i in range(q)], judged),
        "doc_id": [f"d{j}" for j in docs.ravel()],
        "relevance": rng.integers(0, 4, q * judged).astype(np.int32),
    })


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=5000)
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--presentations", type=int, default=10)
    ap.add_argument("--loop-sample", type=int, default=100, help="queries the scipy loop really runs on")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rng = np.random.default_rng(args.seed)
    q, n, m = args.queries, args.candidates, args.presentations
    scores = rng.random((q, m, n))
    print(f"input: {q} queries x {n} candidates x M = {m} presentations (random scores, no ties)")

    t0, c0 = time.perf_counter(), time.process_time()
    fast = tau_psi(scores)
    t_fast, c_fast = time.perf_counter() - t0, time.process_time() - c0

    sample = min(args.loop_sample, q)
    t0 = time.perf_counter()
    slow = scipy_loop(scores[:sample])
    t_loop_sample = time.perf_counter() - t0
    t_loop = t_loop_sample * q / sample
    err = float(np.max(np.abs(slow - fast[:sample])))

    print(f"tau-PSI vectorised (all {q} queries):      {t_fast:8.3f} s   ({c_fast:.3f} s CPU)   "
          f"mean tau-PSI {fast.mean():.4f}")
    print(f"tau-PSI scipy.stats.kendalltau loop:      {t_loop:8.3f} s   "
          f"(ran on {sample} queries in {t_loop_sample:.3f} s, extrapolated linearly to {q})")
    print(f"speed-up: {t_loop / t_fast:.0f}x   max |difference| on the subsample: {err:.2e}")

    canonical = rng.random((q, n))
    t0 = time.perf_counter()
    table = scores_table(scores, canonical, rng)
    qrels = random_qrels(q, n, rng)
    t_build = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    metrics = compute_metrics(table, qrels, dataset="bench", task="rerank", variant="random", seed=None)
    t_metrics, c_metrics = time.perf_counter() - t0, time.process_time() - c0
    print(f"compute_metrics on {table.height:,} score rows: {t_metrics:.2f} s wall, {c_metrics:.2f} s CPU "
          f"({metrics.height:,} metric rows; building the input took {t_build:.2f} s, not included)")
    agg = metrics.filter(pl.col("query_id").is_null()).select("perturbation", "metric", "value")
    with pl.Config(tbl_rows=-1, float_precision=4, tbl_hide_dataframe_shape=True):
        print(agg)


if __name__ == "__main__":
    main()
