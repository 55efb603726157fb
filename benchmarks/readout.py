"""Benchmark: CPU number formats for the one-pass readout, and the readout against its alternatives.

SmolLM2 on CPU, prompts of B real DL19 passages, 2 threads.

Default (engines): the same token ids read at the same positions by torch float32,
torch bfloat16 and torch int8 dynamic quantisation of the Linear layers, all loaded in
this process; seconds per prompt and the mean absolute E[g] difference to float32, with
ratios against float32. llama.cpp joins when ``llama_cpp`` imports (llama-cpp-python
ships no wheel on PyPI, so it is a source build; the engine is skipped when absent).

``--methods``: seconds per prompt for (a) the one-pass readout, (b) B separate prefix
passes (one per slot), (c) generating the grades with ``generate()`` (greedy); and (d) a
bare forward pass over the same tokens (no readout) to measure the readout's overhead.

    python benchmarks/readout.py [--data PATH] [--model DIR] [--prompts 3] [--B 20] [--methods]
"""

from __future__ import annotations

import argparse
import json
import math
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
    ap.add_argument("--rounds", type=int, default=2, help="engines: reads per prompt and engine (the fastest counts)")
    ap.add_argument("--methods", action="store_true", help="compare readout methods instead of number formats")
    ap.add_argument("--gguf", type=Path, default=None, help="llama.cpp engine: the GGUF file (needs llama_cpp)")
    args = ap.parse_args(argv)
    if not args.methods:
        return engines(args)

    import numpy as np
    import torch
    from tqdm.auto import tqdm

    from presdep.runtime.models import load_model
    from presdep.scoring.backends import TransformersScorer
    from presdep.scoring.readout import grade_probs

    if not args.data.exists():
        sys.exit(f"benchmark data not found: {args.data} (pass --data)")
    if not (args.model / "config.json").exists():
        sys.exit(f"no model directory at {args.model}; run presdep.runtime.models.fetch_smollm2 or pass --model")
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


def engines(args) -> dict:
    """The number-format table: float32 (reference), bfloat16, int8 dynamic (Linear), llama.cpp if present."""
    import copy

    import numpy as np
    import torch

    from presdep.runtime.models import cpu_native_bf16, load_model
    from presdep.scoring.backends import TransformersScorer

    if not args.data.exists():
        sys.exit(f"benchmark data not found: {args.data} (pass --data)")
    if not (args.model / "config.json").exists():
        sys.exit(f"no model directory at {args.model}; run presdep.runtime.models.fetch_smollm2 or pass --model")
    torch.set_num_threads(args.threads)
    data = json.loads(args.data.read_text())
    prompts = [(e["query"], [h["content"] for h in e["hits"][: args.B]]) for e in data[: args.prompts]]

    f32, tok = load_model(args.model, device="cpu", dtype="float32")
    bf16, _ = load_model(args.model, device="cpu", dtype="bfloat16")
    # Dynamic int8 of every Linear (weights int8, activations quantised per batch).
    int8 = torch.ao.quantization.quantize_dynamic(copy.deepcopy(f32), {torch.nn.Linear}, dtype=torch.qint8)
    scorers = {name: TransformersScorer(m, tok, max_doc_chars=args.max_doc_chars, batch_size=1)
               for name, m in (("torch float32", f32), ("torch bfloat16", bf16),
                               ("torch int8 dynamic (Linear)", int8))}
    ref = scorers["torch float32"]
    built = [ref.build(q, d) for q, d in prompts]
    for sc in scorers.values():  # every engine reads the same token ids at the same positions
        assert [sc.build(q, d).ids for q, d in prompts] == [b.ids for b in built]
    read = {name: (lambda sc: (lambda b: sc.read_built([b])[0]))(sc) for name, sc in scorers.items()}
    skipped = {}
    try:
        read["llama.cpp"] = _llama_cpp_reader(args, ref.grade_ids)
    except (ImportError, FileNotFoundError) as exc:
        skipped["llama.cpp"] = str(exc)

    grades = np.arange(4, dtype=np.float64)
    warm = ref.build(prompts[0][0], prompts[0][1][:2])
    for fn in read.values():
        fn(warm)  # warm-up on a short prompt: allocator, kernels, quantisation packing
    secs = {n: [math.inf] * len(built) for n in read}
    eg: dict[str, list] = {n: [None] * len(built) for n in read}
    for i, b in enumerate(built):
        for _ in range(max(1, args.rounds)):  # engines interleaved, min kept: background load hits all alike
            for name, fn in read.items():
                t0 = time.perf_counter()
                p = fn(b)
                secs[name][i] = min(secs[name][i], time.perf_counter() - t0)
                eg[name][i] = np.asarray(p, dtype=np.float64) @ grades
    base = "torch float32"
    rows = []
    for name in read:
        diff = float(np.mean(np.concatenate([np.abs(a - r) for a, r in zip(eg[name], eg[base])])))
        rows.append({"engine": name, "sec_per_prompt": secs[name],
                     "ratio_to_float32": [s / r for s, r in zip(secs[name], secs[base])],
                     "mean_abs_eg_diff": diff})
    native, why = cpu_native_bf16()
    result = {"model": str(args.model), "B": args.B, "threads": args.threads, "tokens": [len(b.ids) for b in built],
              "cpu_native_bf16": native, "cpu": why, "engines": rows, "skipped": skipped}
    print(f"SmolLM2, B = {args.B}, {args.threads} threads, prompts of {' / '.join(str(len(b.ids)) for b in built)} tokens; {why}")
    print("| engine | seconds per prompt | ratio to float32 | mean abs. E[g] difference to float32 |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {' / '.join(f'{x:.2f}' for x in r['sec_per_prompt'])} | "
              f"{' / '.join(f'{x:.2f}' for x in r['ratio_to_float32'])} | {r['mean_abs_eg_diff']:.4f} |")
    for name, why_not in skipped.items():
        print(f"| {name} | not run: {why_not} | | |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def _llama_cpp_reader(args, grade_ids):
    """llama.cpp on the GGUF: logits at the read positions only (all-logits mode, rows picked)."""
    import numpy as np

    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise ImportError("llama-cpp-python is not installed (PyPI has no wheel: a source build)") from exc
    if args.gguf is None or not args.gguf.exists():
        raise FileNotFoundError("pass --gguf with the SmolLM2 GGUF file")
    llm = Llama(model_path=str(args.gguf), n_ctx=8192, n_threads=args.threads, logits_all=True, verbose=False)

    def read(built):
        llm.reset()
        llm.eval(list(built.ids))
        logits = np.asarray(llm.scores)[list(built.read_positions)][:, list(grade_ids)].astype(np.float64)
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return read


if __name__ == "__main__":
    main()
