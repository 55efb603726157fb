"""Seconds per LoRA training step and tokens per second of the student readout.

Uses resources/models/smollm2 (SmolLM2-135M-Instruct) if it has been fetched, else a
tiny random model over the SmolLM2 tokenizer; the output says which. One step =
forward over ``views x batch_chunks`` prompts of B synthetic documents, OC-SFT loss,
backward, AdamW update; the first ``--warmup`` steps are not timed.

    python benchmarks/train_step.py [--steps 5] [--B 5] [--batch-chunks 2] [--threads 2] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--B", type=int, default=5)
    ap.add_argument("--batch-chunks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model-dir", default=str(REPO / "resources" / "models" / "smollm2"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoTokenizer

    from presdep.runtime.models import load_model
    from presdep.training.lora import add_lora, enable_checkpointing, tiny_causal_lm
    from presdep.training.objectives import OCSFT, QueryList
    from presdep.training.readout_grad import GradReadout

    model_dir = Path(args.model_dir)
    if (model_dir / "config.json").exists() and any(model_dir.glob("*.safetensors")):
        model, tok = load_model(str(model_dir), device=args.device, dtype="auto")
        which = f"SmolLM2-135M-Instruct ({model_dir.name})"
    elif (model_dir / "tokenizer.json").exists():
        tok = AutoTokenizer.from_pretrained(model_dir)
        model = tiny_causal_lm(tok, 0).to(args.device)
        which = "tiny random Llama (2 layers, hidden 64) over the SmolLM2 tokenizer"
    else:
        raise SystemExit(f"no model or tokenizer at {model_dir}: fetch SmolLM2 first (the fetch rule)")
    if model.device.type == "cuda":
        enable_checkpointing(model)
    model.config.use_cache = False
    model = add_lora(model, {"r": 16, "alpha": 32, "dropout": 0.05,
                             "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]}, seed=1)
    model.train()
    readout = GradReadout(model, tok, max_doc_chars=1200)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-4)
    obj = OCSFT(args.B, [0, 1], lam=1.0)
    docs = tuple(f"Velmora Quintrel{i} was born in the town of Tarnis{i}. Few records of this period survive." for i in range(args.B))
    queries = [QueryList(f"q{c}", "Where was Velmora Quintrel born?", tuple(f"d{i}" for i in range(args.B)), docs,
                         tuple(float(i % 4) for i in range(args.B)), tuple(1.5 for _ in range(args.B)))
               for c in range(args.batch_chunks)]
    times, tokens = [], []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        items = obj.items(queries, step)  # one B-chunk per query, two in-chunk views
        prompts = [(queries[it.query].query, [queries[it.query].docs[i] for i in v]) for it in items for v in it.views]
        built = readout.build(prompts)
        flat = readout.expected_from_built(built)
        scores = [flat[2 * k : 2 * k + 2] for k in range(len(items))]
        loss, _ = obj.loss(queries, items, scores, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
            tokens.append(sum(len(b.ids) for b in built))
    sps = statistics.mean(times)
    out = {
        "model": which,
        "device": str(model.device),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "prompts_per_step": 2 * len(queries),
        "B": args.B,
        "tokens_per_step": statistics.mean(tokens),
        "seconds_per_step": round(sps, 4),
        "seconds_per_step_min": round(min(times), 4),
        "tokens_per_second": round(statistics.mean(tokens) / sps, 1),
        "timed_steps": args.steps,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
