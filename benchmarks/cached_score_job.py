"""A score job answered by the read cache: its cost with the tokenizer read from its files
against the same job tokenizing through transformers (which imports torch).

    python benchmarks/cached_score_job.py [--tokenizer resources/models/smollm2] [--pairs 5]

Builds a tiny random Llama with the given model folder's tokenizer (a fetched folder: SmolLM2's
by default), records its tokenizer check as the fetch_model rule does, fills a read cache with
one job, then runs the same job A B A B ... in fresh processes: A on the checked folder, B on a
copy without the check. Prints each one's median CPU and wall seconds (the children's rusage)
and the median of the pairwise ratios A/B, and whether A loaded torch.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = """
import json, sys
from presdep.config.records import Protocol
from presdep.scoring.job import score_dataset_files, scoring_run
a = json.loads(sys.argv[1])
score_dataset_files(candidates_path=a["cand"], qrels_path=None, out_path=a["out"], dataset="bench",
                    run=scoring_run("bench", a["variant"], model=a["model"], model_dir=a["dir"]),
                    protocol=Protocol.checked(a["protocol"]), threads=1, read_cache=a["cache"])
print(json.dumps({"torch": "torch" in sys.modules}))
"""


def build(tokenizer_dir: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from presdep.runtime.models import check_tokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(out)
    tok.save_pretrained(out)
    check_tokenizer(out)


def candidates(path: Path, queries: int = 8, docs: int = 10) -> None:
    import polars as pl

    rows = [(f"q{q}", f"question {q} about water", f"q{q}d{d}", f"passage {d} of query {q}: boiling point", d + 1,
             1.0 / (d + 1)) for q in range(queries) for d in range(docs)]
    pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"],
                 orient="row").with_columns(pl.col("first_stage_rank").cast(pl.Int32)).write_parquet(path)


def job(work: Path, model_dir: Path) -> tuple[float, float, bool]:
    args = {"cand": str(work / "cand.parquet"), "out": str(work / "out.parquet"), "dir": str(model_dir),
            "cache": str(work / "cache"),
            "variant": {"scorer": "transformers", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
                        "bsc_ensembles": 2, "capcal_beta": 1.0, "model": "tiny", "tasks": ["reranking"]},
            "model": {"source": "local", "device": "cpu", "dtype": "float32", "batch_size": 4},
            "protocol": {"seed": 0, "M": 4, "B": 5, "max_doc_chars": 80, "perturbations": ["random_shuffle"]}}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True, check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, json.loads(res.stdout.strip().splitlines()[-1])["torch"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", default="resources/models/smollm2", help="a fetched model folder")
    p.add_argument("--pairs", type=int, default=5)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="presdep-cached-job-") as tmp:
        work = Path(tmp)
        build(Path(a.tokenizer), work / "checked")
        shutil.copytree(work / "checked", work / "through")
        (work / "through" / ".presdep-tokenizer-check").unlink()
        candidates(work / "cand.parquet")
        job(work, work / "checked")  # fills the cache
        rows = {"files": [], "transformers": []}
        for _ in range(a.pairs):
            rows["files"].append(job(work, work / "checked"))
            rows["transformers"].append(job(work, work / "through"))
    for name, runs in rows.items():
        print(f"{name:>12}: CPU {statistics.median(r[0] for r in runs):.2f} s, wall "
              f"{statistics.median(r[1] for r in runs):.2f} s, torch loaded in {sum(r[2] for r in runs)}/{len(runs)}")
    ratio = statistics.median(f[0] / t[0] for f, t in zip(rows["files"], rows["transformers"]))
    print(f"CPU ratio files/transformers (median of {a.pairs} pairs): {ratio:.3f}")


if __name__ == "__main__":
    main()
