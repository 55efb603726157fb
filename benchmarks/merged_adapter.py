"""Benchmark: a trained student read merged against unmerged, in float32 and bfloat16.

Reads the same prompts (the default run's synthetic test queries, B documents each, as the
score job builds them) with one trained student of a finished ``make run``: the unmerged
``PeftModel`` and the merged model (presdep.scoring.merged_adapter: merged in float32, cast
to the read dtype), in float32 and in bfloat16. Prints each read's mean and max |delta E[g]|
against the float32 unmerged read (the reference) and its forward seconds per token, with the
ratio against the unmerged read of the same dtype, measured in this process.

    python benchmarks/merged_adapter.py [--results results] [--model resources/models/smollm2]
                                        [--student oc_sft__lambda1/seed42] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def prompts_of(results: Path, B: int) -> list[tuple[str, list[str]]]:
    """Every first-stage prompt of the synthetic test set: (query, B documents) in rank order."""
    import polars as pl

    cand = pl.read_parquet(results / "synthetic" / "candidates.parquet").sort("query_id", "first_stage_rank")
    out = []
    for (_, ), g in cand.group_by("query_id", maintain_order=True):
        docs = g["doc"].to_list()
        out += [(g["query"][0], docs[i : i + B]) for i in range(0, len(docs), B)]
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=REPO / "results")
    ap.add_argument("--model", type=Path, default=REPO / "resources" / "models" / "smollm2")
    ap.add_argument("--student", default="oc_sft__lambda1/seed42")
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--max-doc-chars", type=int, default=1200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from presdep.scoring.backends import TransformersScorer
    from presdep.scoring.merged_adapter import merged_student, unmerged_student

    torch.set_num_threads(args.threads)
    adapter = args.results / "models" / args.student / "adapter"
    tok = AutoTokenizer.from_pretrained(args.model)
    prompts = prompts_of(args.results, args.B)

    def base(dtype):
        return AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).eval()

    models = {
        "float32 unmerged": unmerged_student(base(torch.float32), adapter),
        "float32 merged": merged_student(base(torch.float32), adapter, shared=False),
        "bfloat16 unmerged": unmerged_student(base(torch.bfloat16), adapter),
        "bfloat16 merged (float32 merge, cast)": merged_student(base(torch.float32), adapter,
                                                               shared=False).to(torch.bfloat16),
        "bfloat16 merged (merge in bfloat16)": merged_student(base(torch.bfloat16), adapter, shared=False),
    }
    grades = np.arange(4.0)
    reads, seconds = {}, {}
    for name, model in models.items():
        sc = TransformersScorer(model, tok, max_doc_chars=args.max_doc_chars, batch_size=1)
        reads[name] = np.concatenate(sc.slot_probs(prompts)) @ grades  # one warm-up pass, kept as the read
        runs = []
        for _ in range(args.repeats):
            sc.forward.seconds, sc.tokens_read = 0.0, 0
            sc.slot_probs(prompts)
            runs.append(sc.forward.seconds / sc.tokens_read)
        seconds[name] = statistics.median(runs)
    ref = reads["float32 unmerged"]
    rows = {}
    for name in models:
        dtype = name.split()[0]
        d = np.abs(reads[name] - ref)
        rows[name] = {"mean_abs_delta_eg": float(d.mean()), "max_abs_delta_eg": float(d.max()),
                      "forward_s_per_token": seconds[name],
                      "ratio_to_unmerged": seconds[name] / seconds[f"{dtype} unmerged"]}
    out = {"student": args.student, "prompts": len(prompts), "slots": int(ref.size), "threads": args.threads,
           "repeats": args.repeats, "torch": torch.__version__, "rows": rows}
    print(f"{args.student}: {len(prompts)} prompts, {ref.size} slots; reference: the float32 unmerged read")
    print(f"{'read':40s} {'mean|dE|':>9s} {'max|dE|':>9s} {'us/token':>9s} {'x unmerged':>10s}")
    for name, r in rows.items():
        print(f"{name:40s} {r['mean_abs_delta_eg']:9.5f} {r['max_abs_delta_eg']:9.5f} "
              f"{r['forward_s_per_token'] * 1e6:9.1f} {r['ratio_to_unmerged']:10.3f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
