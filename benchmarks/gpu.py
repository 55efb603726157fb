"""GPU benchmark: readout throughput, MFU and emulated vLLM readouts; bf16 against fp32 and the batch
noise floor (random weights); one LoRA step; a CUDA score job; a block of rates for ``presdep plan``.

One prepared run (the default ``--seconds-budget`` of 360 s, well under 8 minutes on one H200) on a
random ``Qwen3ForCausalLM`` of the Qwen3-4B shape (36 layers, hidden 2560, 32 query / 8 key-value
heads, head_dim 128, FFN 9728, vocabulary 151,936, tied embeddings; bf16, SDPA). Prompts are random
token ids shaped as the skeleton builder shapes them: a header, B = 20 documents, then the answer
skeleton with one read position per slot (the token before each dummy grade); 4 fixed grade token
ids. Each figure has its own baseline, measured in the same process:

1. readout (benchmarks/gpu_readout.py): prompt tokens/s per batch size on padded, length-sorted
   batches, through presdep's readout (``slot_only``: ``read_built``'s pad_batch, decoder, LM head
   on the B read rows, float64 softmax) against a bare decoder forward (``model.model``, no LM
   head); MFU against the bf16 matmul rate measured in this run; peak memory; OOM per batch size.
   Beside it, two emulations, each with its ratio to ``slot_only``: ``full_vocab_per_position``
   (vLLM's ``prompt_logprobs=20``: the LM head over the vocabulary at every position, topk 20,
   host-side dicts; device and host seconds apart) and ``grade_rows_per_position`` (vLLM's pooling
   runner with the four grade rows of the LM head as a token-level classifier). Part 1 starts no
   new batch size after half the budget.
2. precision (benchmarks/gpu_noise.py): E[g] of a bf16 model against an fp32 copy of the same
   (bf16) weights.
3. noise floor (benchmarks/gpu_noise.py): the same prompts read alone and inside batches of 16 (the
   paper's batch size) with other companions, padding and batch positions: |delta E[g]| against
   the alone read, and tau-PSI of the R batched reads. Parts 2 and 3 are labelled
   ``"weights": "random"``: kernel-level figures, not a trained Qwen3-4B's score distribution.
4. the LoRA training step as the loop runs it (benchmarks/gpu_training.py; r 16, alpha 32, the six
   projections, OC-SFT on 32 chunks = 64 prompts of 2,600-3,200 tokens, micro-batches cut by the
   memory model's budget, AdamW): checkpointing on without and with the padding mask, and off;
   measured peak beside the predicted one, and the SDPA backend the attention shape runs.
5. a real ``presdep.scoring.run.score_dataset`` job on a tiny model saved to disk, on ``--device``
   (only where polars imports; else recorded as skipped).

The output's top-level ``rates`` (device, readout_slot_tokens_per_s, readout_full_vocab_tokens_per_s,
readout_grade_rows_tokens_per_s, train_tokens_per_s, matmul_bf16_flops_per_s; null where a part did
not run) is what ``presdep plan --rates`` reads; ``rates_from`` says which rows they are.

It needs only what a stock GPU image has (torch, transformers, peft, numpy, pyyaml, tqdm): the parts
1-4 import presdep modules whose import chains need neither polars nor jsonschema (a test hides
both, and the workflow's other tools, and runs the script).

    python benchmarks/gpu.py [--device cuda] [--tiny] [--batch-sizes 1,2,4,8,16,32] [--repeats 3]
                             [--seconds-budget 360] [--out benchmarks/out/gpu.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (REPO, HERE):  # a checkout run without installing presdep (a bare GPU image); the parts' modules
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from gpu_common import SyntheticPrompts, build_model  # noqa: E402
from gpu_noise import kendall_discordance, part_noise, part_precision, tau_psi_of_reads  # noqa: E402
from gpu_readout import part_readout  # noqa: E402
from gpu_training import part_training  # noqa: E402

from presdep.runtime.flops import FLOPS_FORMULA, sequence_flops  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "out" / "gpu.json"
READOUT_SHARE = 0.5  # part 1 starts no new batch size after this share of the budget: parts 2-4 need the rest

# The Qwen3-4B shape, and a tiny one for CPU tests. Prompt lengths are totals (header + documents +
# skeleton); ``prefix`` is the tokens of one skeleton line before its grade ("[i] Grade: ").
# noise_batch 16: the paper's config reads with batch size 16.
FULL = dict(layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128, ffn=9728, vocab=151936,
            B=20, len_lo=2000, len_hi=2800, header=150, prefix=6, pool=32, batch_sizes=[1, 2, 4, 8, 16, 32],
            repeats=3, matmul_n=8192, matmul_reps=5, precision_prompts=4, noise_targets=4, noise_batch=16,
            noise_reads=6, lora_chunks=32, lora_len_lo=2600, lora_len_hi=3200, lora_steps=1, cpu_device_gib=0)
TINY = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512,
            B=20, len_lo=170, len_hi=230, header=20, prefix=3, pool=8, batch_sizes=[1, 2, 4],
            repeats=1, matmul_n=256, matmul_reps=3, precision_prompts=2, noise_targets=2, noise_batch=4,
            noise_reads=3, lora_chunks=4, lora_len_lo=170, lora_len_hi=230, lora_steps=1, cpu_device_gib=0.012)
RATE_KEYS = ("device", "readout_slot_tokens_per_s", "readout_full_vocab_tokens_per_s",
             "readout_grade_rows_tokens_per_s", "train_tokens_per_s", "matmul_bf16_flops_per_s")

__all__ = ["FLOPS_FORMULA", "FULL", "RATE_KEYS", "TINY", "kendall_discordance", "main", "rates", "sequence_flops",
           "summary", "tau_psi_of_reads"]


def prepare_imports() -> dict:
    """What this image allows: part 5 (a real score job) needs polars, parts 1-4 do not."""
    try:
        import polars  # noqa: F401
        have_polars = True
    except ImportError:
        have_polars = False
    return {"polars": have_polars}


# ---------------------------------------------------------------- part 5: a score_dataset job


def _char_tokenizer():
    """One token per printable character, with a chat template (digits are single tokens)."""
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("<\\|[a-z_0-9]+\\|>|."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>", eos_token="</s>",
                                  additional_special_tokens=specials[4:])
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tok


def part_score_job(args, device) -> dict:
    import polars as pl
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from presdep.config.records import Protocol, ScoringRun
    from presdep.contracts.schemas import read_metadata, read_table
    from presdep.scoring.factory import make_scorer
    from presdep.scoring.run import score_dataset

    with tempfile.TemporaryDirectory(prefix="presdep-gpu-bench-") as tmp_name:
        tmp = Path(tmp_name)
        tok = _char_tokenizer()
        cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096,
                          tie_word_embeddings=True)
        torch.manual_seed(3)
        model = Qwen3ForCausalLM(cfg).eval()
        model.save_pretrained(tmp / "model")
        tok.save_pretrained(tmp / "model")
        rows = [(f"q{q}", f"query {q}", f"q{q}d{r}", f"passage {r} about topic {q} and {r * q}", r, 1.0 / r)
                for q in range(2) for r in range(1, 7)]
        cand = pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank",
                                          "first_stage_score"], orient="row").with_columns(
            pl.col("first_stage_rank").cast(pl.Int32))
        variant = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 2,
                   "capcal_beta": 1.0, "scorer": "transformers",
                   "model": {"source": "local", "path": str(tmp / "model"), "device": str(device), "dtype": "auto",
                             "batch_size": 4}}
        run = ScoringRun.checked(variant)
        protocol = Protocol.checked({"seed": 3, "M": 2, "B": 3, "perturbations": ["random_shuffle"],
                                     "max_doc_chars": 60})
        scorer = make_scorer(run, protocol.prompt)
        out = tmp / "scores.parquet"
        profile = score_dataset(cand, dataset="toy", run=run, protocol=protocol, out_path=out, scorer=scorer,
                                read_cache=tmp / "cache")
        meta = read_metadata(out)
        table = read_table(out, "scores")
        ident = scorer.cache_identity()
        return {"rows": table.height, "dtype": meta.get("dtype"), "scorer_dtype": meta["scorer"].get("dtype"),
                "dtype_reason": meta["scorer"].get("dtype_reason"), "device_type": meta["scorer"].get("device_type"),
                "model_device": str(scorer.device), "cache_identity": ident,
                "read_cache": meta.get("read_cache"), "profile": profile,
                "scores_finite": bool(np.isfinite(table["score"].to_numpy()).all())}


# ---------------------------------------------------------------- driver


def _environment(device: Any) -> dict:
    import torch
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "numpy": np.__version__, "cuda": torch.version.cuda, "device": str(device),
           "cpu_threads": torch.get_num_threads(), "platform": platform.platform()}
    try:
        env["peft"] = importlib.import_module("peft").__version__
    except ImportError:
        env["peft"] = None
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(device_name=torch.cuda.get_device_name(0), device_memory_gib=props.total_memory / 2**30,
                   capability=f"{props.major}.{props.minor}")
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


def rates(result: dict) -> tuple[dict, dict]:
    """The block ``presdep plan --rates`` reads (exactly RATE_KEYS; null where the part did not run),
    and which rows its figures come from."""
    env, parts = result["environment"], result["parts"]
    out: dict = dict.fromkeys(RATE_KEYS)
    out["device"] = env.get("device_name") if env["device"].startswith("cuda") else "cpu"
    src: dict = {}
    ro = parts.get("readout", {})
    ok = [r for r in ro.get("batch_sizes", []) if not r.get("oom")]
    if ok:
        best = max(ok, key=lambda r: r["tokens_per_s_readout"])
        out["readout_slot_tokens_per_s"] = best["tokens_per_s_readout"]
        for key, name in (("readout_full_vocab_tokens_per_s", "full_vocab_per_position"),
                          ("readout_grade_rows_tokens_per_s", "grade_rows_per_position")):
            row = best["rows"][name]
            out[key] = None if row.get("oom") else row["tokens_per_s"]
        src["readout_batch_size"] = best["batch_size"]
        src["readout"] = ("slot_only's best batch size; the emulated rows at that batch size, full_vocab as the "
                          "lower of its device-bound and host-bound rates")
    if "matmul" in ro:
        src["matmul_dtype"] = ro["matmul"]["dtype"]
        if ro["matmul"]["dtype"] == "bfloat16":  # an fp32 run's rate is no bf16 rate
            out["matmul_bf16_flops_per_s"] = ro["matmul"]["best_flops_per_s"]
    ran = [s for s in parts.get("lora", {}).get("settings", [])
           if s.get("gradient_checkpointing") and s.get("tokens_per_s") is not None]
    if ran:
        row = min(ran, key=lambda s: s["padding_mask"])  # without the mask (the CUDA default) where it ran
        out["train_tokens_per_s"] = row["tokens_per_s"]
        src["train"] = {"gradient_checkpointing": True, "padding_mask": row["padding_mask"],
                        "micro_batches": row["micro_batches"]}
    return out, src


def _parse_sizes(text: str) -> list[int]:
    sizes = [int(x) for x in text.split(",") if x.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes are positive integers, got {text!r}")
    return sizes


def _fmt(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _row_cells(r: dict) -> str:
    rows = r.get("rows", {})
    fv, gr = rows.get("full_vocab_per_position", {}), rows.get("grade_rows_per_position", {})
    fv_cells = ("OOM | | " if fv.get("oom") else
                f"{fv['tokens_per_s_device']:.4g} | {fv['tokens_per_s_host']:.4g} | "
                f"{fv['ratio_to_slot_only']:.3f} ")
    gr_cells = "OOM |" if gr.get("oom") else f"{gr['tokens_per_s']:.4g} ({gr['ratio_to_slot_only']:.3f}) |"
    return f"| {fv_cells}| {gr_cells}"


def summary(result: dict) -> str:
    env, parts = result["environment"], result["parts"]
    lines = [f"presdep GPU benchmark on {env.get('device_name')} ({env['device']}), torch {env['torch']}, "
             f"transformers {env['transformers']}; shape {result['shape_name']}, dtype {result['dtype']}, "
             f"total {result['elapsed_s']:.1f} s"]
    ro = parts.get("readout", {})
    if "batch_sizes" in ro:
        m = ro["matmul"]
        lines.append(f"1. readout: {ro['params']['non_embedding'] / 1e9:.3g} B non-embedding params, prompts "
                     f"{ro['prompt_tokens']['min']}-{ro['prompt_tokens']['max']} tokens; matmul {m['n']}^3 "
                     f"{m['dtype']}: {m['best_flops_per_s'] / 1e12:.4g} TFLOP/s")
        lines.append("   | batch | tokens/s slot_only | tokens/s bare | overhead | MFU slot_only | MFU bare | peak GiB "
                     "| EMULATED full_vocab tokens/s device | host | ratio | EMULATED grade_rows tokens/s (ratio) |")
        for r in ro["batch_sizes"]:
            if r.get("oom"):
                lines.append(f"   | {r['batch_size']} | OOM | | | | | | | | | |")
                continue
            lines.append(f"   | {r['batch_size']} | {r['tokens_per_s_readout']:.4g} | {r['tokens_per_s_bare']:.4g} | "
                         f"{r['overhead_ratio']:.3f} | {r['mfu_readout']:.3f} | {r['mfu_bare']:.3f} | "
                         f"{_fmt(r['peak_memory_gib_readout'], '.2f')} {_row_cells(r)}")
        lines.append("   EMULATED rows (not vLLM itself): full_vocab = vLLM prompt_logprobs=20 (ratio from the lower "
                     "of device and host rates); grade_rows = vLLM token-level pooling with the 4 grade rows")
    if any(parts.get(k, {}).get("weights") == "random" for k in ("precision", "noise")):
        lines.append("2.-3. RANDOM WEIGHTS: kernel-level figures, not a trained Qwen3-4B's score distribution")
    pr = parts.get("precision", {})
    if "max_abs_delta_eg" in pr:
        lines.append(f"2. bf16 vs fp32 E[g] over {pr['slots']} slots: mean {pr['mean_abs_delta_eg']:.3g}, "
                     f"max {pr['max_abs_delta_eg']:.3g} (random weights)")
    no = parts.get("noise", {})
    if "max_abs_delta_eg" in no:
        lines.append(f"3. noise floor (batch {no['batch_size']}, {no['reads_per_prompt']} reads x {no['prompts']} "
                     f"prompts): alone vs alone max {no['alone_vs_alone_max_abs']:.3g}; batched vs alone mean "
                     f"{no['mean_abs_delta_eg']:.3g}, max {no['max_abs_delta_eg']:.3g}; tau-PSI mean "
                     f"{no['tau_psi_mean']:.3g}, max {no['tau_psi_max']:.3g} (random weights)")
    lo = parts.get("lora", {})
    for r in lo.get("settings", []):
        what = (f"4. LoRA step ({lo['prompts_per_step']} prompts), checkpointing "
                f"{'on' if r['gradient_checkpointing'] else 'off'}, mask {'on' if r['padding_mask'] else 'off'}")
        if "skipped" in r:
            lines.append(f"{what}: skipped ({r['skipped']})")
            continue
        what += f", SDPA {r['sdpa_backend_probe']}"
        if not r.get("fits"):
            lines.append(f"{what}: one chunk does not fit ({r.get('error', '')[:80]})")
        elif r.get("oom"):
            lines.append(f"{what}: OOM (predicted {r['predicted_peak_gib']:.2f} GiB)")
        else:
            lines.append(f"{what}: {r['micro_batches']} micro-batches, {r['seconds_per_step']:.3g} s/step, "
                         f"{r['tokens_per_s']:.4g} tokens/s, peak {_fmt(r['peak_memory_gib'], '.2f')} GiB, "
                         f"predicted {r['predicted_peak_gib']:.2f} GiB")
    sj = parts.get("score_job", {})
    if "dtype" in sj:
        lines.append(f"5. score_dataset on {sj['device_type']}: {sj['rows']} rows, dtype {sj['dtype']}, "
                     f"cache identity dtype {sj['cache_identity']['dtype']} / {sj['cache_identity']['device_type']}")
    lines.append("rates (presdep plan --rates): " + ", ".join(
        f"{k} {v if isinstance(v, str) else _fmt(v, '.4g')}" for k, v in result["rates"].items()))
    for name, why in result["skipped"].items():
        lines.append(f"   skipped {name}: {why}")
    return "\n".join(lines)


def _write_json(path: Path, result: dict) -> None:
    """Atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny shape (2 layers, hidden 64, ~200-token prompts)")
    ap.add_argument("--batch-sizes", type=_parse_sizes, default=None, help="comma-separated (default 1,...,32)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per batch size (default 3, tiny 1)")
    ap.add_argument("--lora-steps", type=int, default=None, help="timed LoRA steps after the warm-up one")
    ap.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                    help="the main model's dtype; auto: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--seconds-budget", type=float, default=360.0,
                    help="stop at the next part boundary (or batch size, or LoRA row) once this much time has "
                         f"passed; part 1 starts no batch size after {READOUT_SHARE:.0%} of it")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the output JSON (its folder is created)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    deadline = t_start + args.seconds_budget
    imports = prepare_imports()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda but torch sees no CUDA device (pass --device cpu)")
    shape = dict(TINY if args.tiny else FULL)
    args.batch_sizes = args.batch_sizes or shape["batch_sizes"]
    args.repeats = max(1, args.repeats if args.repeats is not None else shape["repeats"])
    args.lora_steps = max(1, args.lora_steps if args.lora_steps is not None else shape["lora_steps"])
    shape["pool"] = max(shape["pool"], max(args.batch_sizes), shape["noise_batch"])
    device = torch.device(args.device)
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
             "bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    rng = np.random.default_rng(args.seed)

    t0 = time.perf_counter()
    model = build_model(shape, device, dtype, args.seed)
    synth = SyntheticPrompts(shape["vocab"], shape["B"], shape["prefix"], shape["header"], rng)
    pool = synth.pool(shape["pool"], shape["len_lo"], shape["len_hi"])
    build_s = time.perf_counter() - t0

    result: dict = {
        "benchmark": "gpu", "shape_name": "tiny" if args.tiny else "Qwen3-4B (random weights)",
        "shape": {k: shape[k] for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "B",
                                        "len_lo", "len_hi", "pool", "noise_batch")},
        "model_class": type(model).__name__, "attn_implementation": model.config._attn_implementation,
        "dtype": str(dtype).replace("torch.", ""), "grade_token_ids": list(synth.grade_ids), "pad_id": synth.pad_id,
        "seconds_budget": args.seconds_budget, "seed": args.seed,
        "environment": _environment(device), "imports": imports, "model_build_s": build_s,
        "parts": {}, "elapsed_s_per_part": {}, "skipped": {},
    }

    # Part 4 adds LoRA adapters to the model itself, so it runs after every inference part.
    readout_deadline = t_start + READOUT_SHARE * args.seconds_budget
    plan = [
        ("readout", lambda: part_readout(model, synth, pool, shape, args, device, readout_deadline)),
        ("precision", lambda: part_precision(model, synth, pool, shape, device)),
        ("noise", lambda: part_noise(model, synth, pool, shape, device, rng)),
        ("lora", lambda: part_training(model, synth, shape, args, device, rng, deadline)),
        ("score_job", lambda: part_score_job(args, device)),
    ]
    for name, fn in plan:
        if name == "score_job" and not imports["polars"]:
            result["parts"][name] = {"skipped": "polars not installed"}
            result["skipped"][name] = "polars not installed"
            continue
        spent = time.perf_counter() - t_start
        if spent > args.seconds_budget:
            why = f"seconds budget spent ({spent:.0f} s of {args.seconds_budget:.0f} s) before this part"
            result["parts"][name] = {"skipped": why}
            result["skipped"][name] = why
            continue
        t0 = time.perf_counter()
        try:
            result["parts"][name] = fn()
        except Exception as exc:  # noqa: BLE001 - one failing part must not lose the others' figures
            traceback.print_exc()
            why = f"failed: {type(exc).__name__}: {exc}"[:500]
            result["parts"][name] = {"skipped": why}
            result["skipped"][name] = why
            _write_json(args.out, result)
            continue
        result["elapsed_s_per_part"][name] = time.perf_counter() - t0
        print(f"[gpu benchmark] {name}: {result['elapsed_s_per_part'][name]:.1f} s", file=sys.stderr, flush=True)
        _write_json(args.out, result)  # each finished part is on disk, should a later one be killed
        if name == "readout" and result["parts"][name]["skipped_batch_sizes"]:
            result["skipped"]["readout batch sizes"] = (f"{result['parts'][name]['skipped_batch_sizes']}: "
                                                        "seconds budget spent")
        if name == "lora" and any("skipped" in s for s in result["parts"][name]["settings"]):
            result["skipped"]["lora rows"] = "seconds budget spent"
    result["elapsed_s"] = time.perf_counter() - t_start
    result["rates"], result["rates_from"] = rates(result)
    _write_json(args.out, result)
    print(summary(result))
    print(f"figures written to {args.out}")
    return result


if __name__ == "__main__":
    main()
