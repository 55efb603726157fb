"""Benchmark: the one-pass expected-grade readout against its alternatives.

SmolLM2 on CPU, prompts of B real DL19 passages. Seconds per prompt for
(a) the one-pass readout, (b) B separate prefix passes (one per slot),
(c) generating the grades with ``generate()`` (greedy); and (d) a bare forward
pass over the same tokens (no readout) to measure the readout's overhead.

    python benchmarks/readout.py [--data PATH] [--model DIR] [--prompts 3] [--B 20]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "trec-dl19" / "bm25_retrieve_results_dl19_top100.json"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="rank_llm JSON (DL19 BM25 top-100)")
    ap.add_argument("--model", type=Path,
                    default=Path(os.environ.get("PRESDEP_SMOLLM2_DIR", REPO / "resources" / "models" / "smollm2")))
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--B", type=int, default=20)
    ap.add_argument("--max-doc-chars", type=int, default=1200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from tqdm.auto import tqdm

    from presdep.models import load_model
    from presdep.scoring.backends import TransformersScorer
    from presdep.scoring.readout import grade_probs

    if not args.data.exists():
        sys.exit(f"benchmark data not found: {args.data} (pass --data)")
    if not (args.model / "config.json").exists():
        sys.exit(f"no model directory at {args.model}; run presdep.models.fetch_smollm2 or pass --model")
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model, device="cpu")
    scorer = TransformersScorer(model, tok, max_doc_chars=args.max_doc_chars, batch_size=1)
    data = json.loads(args.data.read_text())
    prompts = [(e["query"], [h["content"] for h in e["hits"][: args.B]]) for e in data[: args.prompts]]
    gids = list(scorer.grade_ids)

    def one_pass(q, docs):
        return scorer.slot_probs([(q, docs)])[0]

    def prefix_passes(q, docs):
        p = scorer.build(q, docs)
        out = []
        with torch.inference_mode():
            for r in p.read_positions:
                logits = model(input_ids=torch.tensor([p.ids[: r + 1]]), logits_to_keep=1).logits[0, -1]
                out.append(grade_probs(logits[gids]).numpy())
        return np.stack(out)

    def bare_forward(ids):
        with torch.inference_mode():
            model(input_ids=ids, logits_to_keep=1)

    line_tokens = len(tok.encode(f"[{args.B}] Grade: 0\n", add_special_tokens=False))

    def generate(q, docs):
        head = scorer.builder.prompt_ids(q, docs)
        with torch.inference_mode():
            out = model.generate(torch.tensor([head]), attention_mask=torch.ones(1, len(head), dtype=torch.long),
                                 max_new_tokens=args.B * line_tokens + 4, do_sample=False, pad_token_id=scorer.pad_id)
        text = tok.decode(out[0, len(head):], skip_special_tokens=True)
        return len(re.findall(r"\[\d+\]\s*Grade:\s*[0-3]", text))

    def timed(fn, *a):
        t0 = time.perf_counter()
        res = fn(*a)
        return time.perf_counter() - t0, res

    one_pass(*prompts[0])  # warm-up (allocator, kernels)
    rows = []
    for q, docs in tqdm(prompts, desc="benchmark", unit="prompt"):
        built = scorer.build(q, docs)
        ids = torch.tensor([built.ids])
        # Interleaved per prompt, so background load hits every method alike.
        ta, pa = timed(one_pass, q, docs)
        tbare, _ = timed(bare_forward, ids)
        ta2, _ = timed(one_pass, q, docs)
        tbare2, _ = timed(bare_forward, ids)
        tb, pb = timed(prefix_passes, q, docs)
        tc, parsed = timed(generate, q, docs)
        rows.append({"tokens": len(built.ids), "a": min(ta, ta2), "bare": min(tbare, tbare2), "b": tb, "c": tc,
                     "max_abs_diff_a_b": float(np.abs(pa - pb).max()), "generated_grade_lines": parsed})
        tqdm.write(json.dumps(rows[-1]), file=sys.stderr)

    med = {k: statistics.median(r[k] for r in rows) for k in ("tokens", "a", "bare", "b", "c")}
    result = {
        "model": str(args.model), "B": args.B, "prompts": len(rows), "threads": args.threads,
        "median_tokens": med["tokens"],
        "sec_per_prompt": {"one_pass": med["a"], "prefix_passes": med["b"], "generate": med["c"],
                           "bare_forward": med["bare"]},
        "ratio_a_over_b": med["a"] / med["b"],
        "ratio_a_over_c": med["a"] / med["c"],
        "readout_overhead_vs_bare": med["a"] / med["bare"] - 1.0,
        "max_abs_diff_one_pass_vs_prefix": max(r["max_abs_diff_a_b"] for r in rows),
        "generated_grade_lines": [r["generated_grade_lines"] for r in rows],
        "per_prompt": rows,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
