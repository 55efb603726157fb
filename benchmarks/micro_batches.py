"""Padding of a training step, one padded batch against sorted micro-batches, and the step's
seconds split and unsplit (same process, same weights).

Prompts are the real readout prompts (the scoring template, a model's tokenizer) of a ranked
collection's first-stage chunks of B; a step is ``--batch-chunks`` random chunks, each read in
two views (OC-SFT). Padding = pad positions / all positions of the step. The timed part
trains a tiny random model over the same tokenizer for a few steps with and without a
micro-batch budget (``--items-per-micro-batch`` items of the step's longest size); the
gradients are equal (tests/unit/training/test_micro_batches.py), so this measures cost only.

    python benchmarks/micro_batches.py --candidates ../shared/data/trec-dl19/bm25_retrieve_results_dl19_top100.json \\
        --tokenizer resources/models/smollm2 [--B 20] [--batch-chunks 32] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time


def _padding(lengths: list[int], budget_items: int | None, views: int) -> float:
    from presdep.training.micro_batches import cut_micro_batches

    sizes = [(views, n) for n in lengths]
    budget = None if budget_items is None else budget_items * views * max(lengths)
    micro = cut_micro_batches(sizes, budget)
    real = views * sum(lengths)
    return 1.0 - real / sum(m.padded_tokens for m in micro)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", required=True, help="a rank_llm JSON file of ranked candidates")
    ap.add_argument("--tokenizer", required=True, help="a model folder with a tokenizer and chat template")
    ap.add_argument("--B", type=int, default=20)
    ap.add_argument("--max-doc-chars", type=int, default=1200)
    ap.add_argument("--batch-chunks", type=int, default=32)
    ap.add_argument("--items-per-micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200, help="random steps for the padding figures")
    ap.add_argument("--timed-steps", type=int, default=3)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from presdep.contracts.presentations import chunk_positions
    from presdep.data.rank_llm import read_rank_llm_json
    from presdep.scoring.template import SkeletonBuilder

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    builder = SkeletonBuilder(tok, max_doc_chars=args.max_doc_chars)
    cands = read_rank_llm_json(args.candidates).sort("query_id", "first_stage_rank")
    lengths = []
    for _, g in cands.group_by("query_id", maintain_order=True):
        docs, query = g["doc"].to_list(), g["query"][0]
        lengths += [len(builder.build(query, [docs[i] for i in pos]).ids)
                    for pos in chunk_positions(len(docs), args.B, "contiguous")]
    rng = random.Random(0)
    one, micro = [], []
    for _ in range(args.steps):
        step = rng.sample(lengths, min(args.batch_chunks, len(lengths)))
        one.append(_padding(step, None, 2))
        micro.append(_padding(step, args.items_per_micro_batch, 2))

    def q(xs, p):
        return round(statistics.quantiles(xs, n=10)[p], 4)

    out = {"prompts": len(lengths), "mean_prompt_tokens": round(statistics.mean(lengths), 1),
           "max_prompt_tokens": max(lengths), "tokenizer": str(args.tokenizer), "B": args.B,
           "padding_one_batch": {"mean": round(statistics.mean(one), 4), "p10": q(one, 0), "p90": q(one, 8)},
           f"padding_sorted_micro_batches_of_{args.items_per_micro_batch}":
               {"mean": round(statistics.mean(micro), 4), "p10": q(micro, 0), "p90": q(micro, 8)}}
    out["step_seconds"] = _timed(tok, lengths, args)
    print(json.dumps(out, indent=1))


def _timed(tok, lengths, args) -> dict:
    """Seconds per step of a tiny random model, one pass against sorted micro-batches."""
    import polars as pl
    import torch

    from presdep.config.records import TrainingSettings
    from presdep.training.loop import _set_up
    from presdep.training.lora import tiny_causal_lm
    from presdep.training.train_step import train_step

    rows, silver = [], []
    for q in range(args.batch_chunks):
        for d in range(args.B):
            did = f"q{q}-d{d}"
            rows.append({"query_id": f"q{q}", "query": f"where was entity {q} born", "doc_id": did,
                         "doc": f"entity {d} was born in town {q * 7 + d}. " * (1 + (q * 5 + d) % 9),
                         "first_stage_rank": d + 1})
            silver.append({"query_id": f"q{q}", "doc_id": did, "label_k1": float(d % 4), "label": 1.5})
    cands, silver = pl.DataFrame(rows), pl.DataFrame(silver)
    from presdep.config import SCHEMA_PATH
    from presdep.config.yaml_io import load_yaml

    student = load_yaml(SCHEMA_PATH)["properties"]["variants"]["additionalProperties"]["properties"]["student"]
    base = {k: v["default"] for k, v in student["properties"].items() if "default" in v}
    base["lora"] = {k: v["default"] for k, v in student["properties"]["lora"]["properties"].items()}
    out = {}
    for label, budget in (("one_pass", "auto"), ("micro_batched", None)):
        settings = {**base, "objective": "oc_sft", "steps": args.timed_steps + 1, "batch_chunks": args.batch_chunks,
                    "lambda": 1.0, "lambda_warmup_steps": 0}
        run = _set_up(tiny_causal_lm(tok, seed=0), tok, student=TrainingSettings.checked(settings),
                      out_dir="/tmp/presdep-bench-micro", B=args.B, seed=42, max_doc_chars=None, silver=silver,
                      train_candidates=cands, train_qrels=None, objective=None)
        if budget is None:  # the budget of --items-per-micro-batch items of the step's longest size
            longest = max(len(run.readout.build([(q.query, list(q.docs[:args.B]))])[0].ids) for q in run.queries)
            run.s = TrainingSettings.checked({**settings, "micro_batch_tokens": 2 * args.items_per_micro_batch * longest})
        run.model.train()
        times, parts = [], []
        for step in range(args.timed_steps + 1):
            t0 = time.perf_counter()
            row, _ = train_step(run, step)
            if step:
                times.append(time.perf_counter() - t0)
                parts.append(row["micro_batches"])
        out[label] = {"seconds": round(statistics.median(times), 3), "micro_batches": parts[-1],
                      "threads": torch.get_num_threads()}
    out["ratio_micro_batched_to_one_pass"] = round(out["micro_batched"]["seconds"] / out["one_pass"]["seconds"], 3)
    return out


if __name__ == "__main__":
    main()
