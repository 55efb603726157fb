"""Benchmark: what the artifact and cache checksums cost on a finished run.

    python benchmarks/checksums.py [--results results] [--cache resources/read_cache] [--run-seconds S] [--repeat 3]

For every Parquet artifact of a finished run (``results/**/*.parquet`` written by
presdep.contracts.schemas.write_table) it times, in this process, the checked path
(write_table + read_table: page checksums, the content and metadata digests, their
verification) against a baseline of plain pyarrow on the same table (no page checksums,
no digests), and the read-cache shards likewise (checked ReadCache refresh against a plain
pyarrow read). It prints the seconds of both, the difference, the bytes the checksums add
and, with ``--run-seconds`` (the workflow's wall time, e.g. Snakemake's "Elapsed time"),
the difference as a share of the run. Every artifact is written once and read at least
once by a later job, so one write + one read per file is the run's cost to a first order.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from presdep.contracts.schemas import METADATA_KEY, read_metadata, read_table, write_table
from presdep.runtime.content_cache import IDENTITY_FILE
from presdep.scoring.read_cache import ReadCache


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def artifacts(results: Path, repeat: int) -> dict:
    checked = plain = 0.0
    bytes_checked = bytes_plain = files = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in sorted(results.rglob("*.parquet")):
            meta = read_metadata(f)
            kind = meta.get("kind")
            if not kind:
                continue
            df = read_table(f, kind)
            a, b = Path(tmp) / "checked.parquet", Path(tmp) / "plain.parquet"
            checked += _best(lambda: (write_table(df, a, kind, meta.get("params")), read_table(a, kind)), repeat)
            # The baseline: the same table, types and provenance JSON, without page checksums or digests.
            arrow = pq.read_table(a)
            arrow = arrow.replace_schema_metadata({METADATA_KEY: arrow.schema.metadata[METADATA_KEY]})
            plain += _best(lambda: (pq.write_table(arrow, b), pq.read_table(b)), repeat)
            bytes_checked += a.stat().st_size
            bytes_plain += b.stat().st_size
            files += 1
    return {"files": files, "checked_s": checked, "plain_s": plain, "bytes_checked": bytes_checked,
            "bytes_plain": bytes_plain}


def cache(root: Path, repeat: int) -> dict:
    """Loading every identity's shards through ReadCache (entry checksums, value checks, page
    checksums) against reading the same shard files with plain pyarrow."""
    dirs = sorted(p.parent for p in root.glob(f"*/{IDENTITY_FILE}"))
    shards = [p for d in dirs for p in sorted(d.glob("*.parquet"))]
    checked = plain = 0.0
    for d in dirs:
        identity = json.loads((d / IDENTITY_FILE).read_text())
        if identity.pop("format", None) != ReadCache.FORMAT_VERSION:
            continue  # an older cache format's folder, never read by this presdep
        checked += _best(lambda: ReadCache(root, identity), repeat)
        plain += _best(lambda: [pq.read_table(p) for p in d.glob("*.parquet")], repeat)
    return {"dirs": len(dirs), "shards": len(shards), "checked_s": checked, "plain_s": plain}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--cache", type=Path, default=Path("resources/read_cache"))
    ap.add_argument("--run-seconds", type=float, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    a = artifacts(args.results, args.repeat)
    extra = a["checked_s"] - a["plain_s"]
    print(f"artifacts: {a['files']} files; checked write+read {a['checked_s']:.3f} s, plain pyarrow "
          f"{a['plain_s']:.3f} s, ratio {a['checked_s'] / max(a['plain_s'], 1e-9):.2f}x, difference {extra:.3f} s")
    print(f"artifacts: {a['bytes_checked']} bytes checked, {a['bytes_plain']} plain "
          f"({a['bytes_checked'] - a['bytes_plain']:+d} bytes, "
          f"{100 * (a['bytes_checked'] - a['bytes_plain']) / max(a['bytes_plain'], 1):+.2f}%)")
    if args.cache.exists():
        c = cache(args.cache, args.repeat)
        extra += c["checked_s"] - c["plain_s"]
        print(f"read cache: {c['shards']} shards in {c['dirs']} identities; checked load {c['checked_s']:.3f} s, "
              f"plain pyarrow {c['plain_s']:.3f} s, difference {c['checked_s'] - c['plain_s']:.3f} s")
    if args.run_seconds:
        print(f"checksums cost {extra:.3f} s of a {args.run_seconds:.0f} s run: {100 * extra / args.run_seconds:.2f}%")


if __name__ == "__main__":
    main()
