"""GPU benchmark: readout throughput, MFU and emulated vLLM readouts; bf16 against fp32, the bf16 LM
head against float32 grade rows and the batch noise floor (random weights); the LoRA training step;
a CUDA score job; a block of rates for ``presdep plan``.

One prepared run on a random ``Qwen3ForCausalLM`` of the Qwen3-4B shape (36 layers, hidden 2560,
32 query / 8 key-value heads, head_dim 128, FFN 9728, vocabulary 151,936, tied embeddings; bf16,
SDPA), inside ``--budget-s`` seconds (default 540: a 10-minute wall-clock limit less a minute for
the imports and the last piece's overrun). Prompts are random token ids shaped as the skeleton
builder shapes them: a header, B = 20 documents, then the answer skeleton with one read position
per slot (the token before each dummy grade); 4 fixed grade token ids. The parts, cheapest first
(PART_COST_S, from the H200 run in benchmarks/measured/h200.json), each with its own baseline
measured in the same process:

- precision (benchmarks/gpu_noise.py): E[g] of a bf16 model against an fp32 copy of the same
  (bf16) weights.
- grade_logits (benchmarks/gpu_logits.py): the grade logits through the full LM head in bf16 (the
  former readout) against the four grade rows in float32, from the same hidden rows: largest logit
  and E[g] differences, and the share of tied E[g] among a prompt's slots.
- score_job (benchmarks/gpu_score_job.py): a real ``presdep.scoring.run.score_dataset`` job on a
  tiny model saved to disk, on ``--device`` (only where polars imports; else recorded as skipped).
- noise (benchmarks/gpu_noise.py): the same prompts read alone and inside batches of 16 (the
  paper's batch size) with other companions, padding and batch positions: |delta E[g]| against
  the alone read, and tau-PSI of the R batched reads. precision, grade_logits and noise are
  labelled ``"weights": "random"``: kernel-level figures, not a trained Qwen3-4B's scores.
- readout (benchmarks/gpu_readout.py): prompt tokens/s per batch size on padded, length-sorted
  batches, through presdep's readout (``slot_only``) against a bare decoder forward; MFU against
  the bf16 matmul rate measured in this run; allocated and reserved peak memory; OOM per batch
  size; beside it two emulations of vLLM readouts, each with its ratio to ``slot_only``.
- lora (benchmarks/gpu_training.py): the LoRA training step as the loop runs it (r 16, alpha 32,
  the six projections, OC-SFT on 32 chunks = 64 prompts of 2,600-3,200 tokens, micro-batches cut
  by the memory model's budget, AdamW), in five settings: float32 adapters with checkpointing
  (without, then with the padding mask) and without; bf16 adapters (cast, dropout 0); bf16
  autocast over float32 adapters (dropout 0). Two timed steps each (the first includes the
  warm-up); allocated and reserved peak beside the predicted one. Last whatever its cost: it
  injects adapters into the model the other parts read.

Budget: a part starts only if its estimate (PART_MIN_S for the two divisible ones: their first
batch size or setting) fits in what is left, else it is recorded as skipped with the reason;
readout stops starting batch sizes in time to leave lora its estimate, and both start a batch
size or setting after their first only if the slowest so far would end in time. Each finished
part, and each batch size and setting of the divisible ones (``"partial": true``), is written to
``--out`` at once.

The output's top-level ``rates`` (device, readout_slot_tokens_per_s, readout_full_vocab_tokens_per_s,
readout_grade_rows_tokens_per_s, train_tokens_per_s, matmul_bf16_flops_per_s; null where a part did
not run) is what ``presdep plan --rates`` reads; ``rates_from`` says which rows they are.

It needs only what a stock GPU image has (torch, transformers, peft, numpy, pyyaml, tqdm): all parts
but score_job import presdep modules whose import chains need neither polars nor jsonschema (a test
hides both, and the workflow's other tools, and runs the script). ``--device cpu --tiny`` is the
smoke run (a 2-layer model, seconds).

    python benchmarks/gpu.py [--device cuda] [--tiny] [--batch-sizes 1,2,4,8,16,32] [--repeats 3]
                             [--lora-steps 2] [--budget-s 540] [--out benchmarks/out/gpu.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (REPO, HERE):  # a checkout run without installing presdep (a bare GPU image); the parts' modules
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from gpu_common import SyntheticPrompts, build_model  # noqa: E402
from gpu_logits import part_grade_logits  # noqa: E402
from gpu_noise import kendall_discordance, part_noise, part_precision, tau_psi_of_reads  # noqa: E402
from gpu_readout import part_readout  # noqa: E402
from gpu_score_job import part_score_job  # noqa: E402
from gpu_summary import summary  # noqa: E402
from gpu_training import part_training  # noqa: E402

from presdep.runtime.flops import FLOPS_FORMULA, sequence_flops  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "out" / "gpu.json"
DEFAULT_BUDGET_S = 540.0

# Seconds per part on one H200 at the FULL shape, rounded up: measured in benchmarks/measured/h200.json
# (precision 3, noise 22, readout 159 for five batch sizes, lora 144 for three settings of one warm-up
# and one timed step), scaled to six batch sizes and five settings of two steps; grade_logits and
# score_job are a few small forwards. The run goes cheapest first, so a short budget drops the dearest.
PART_COST_S = {"precision": 5, "grade_logits": 5, "score_job": 20, "noise": 25, "readout": 200, "lora": 250}
# The divisible parts start if their first batch size or setting fits (they stop on their own later).
PART_MIN_S = {"readout": 45, "lora": 60}
PART_ORDER = tuple(sorted(PART_COST_S, key=lambda k: PART_COST_S[k]))  # stable: ties keep the table's order

# The Qwen3-4B shape, and a tiny one for CPU tests. Prompt lengths are totals (header + documents +
# skeleton); ``prefix`` is the tokens of one skeleton line before its grade ("[i] Grade: ").
# noise_batch 16: the paper's config reads with batch size 16. cost_scale: PART_COST_S's share.
FULL = dict(layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128, ffn=9728, vocab=151936,
            B=20, len_lo=2000, len_hi=2800, header=150, prefix=6, pool=32, batch_sizes=[1, 2, 4, 8, 16, 32],
            repeats=3, matmul_n=8192, matmul_reps=5, precision_prompts=4, logits_prompts=16, logits_batch=4,
            noise_targets=4, noise_batch=16, noise_reads=6, lora_chunks=32, lora_len_lo=2600, lora_len_hi=3200,
            lora_steps=2, cpu_device_gib=0, cost_scale=1.0)
TINY = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512,
            B=20, len_lo=170, len_hi=230, header=20, prefix=3, pool=8, batch_sizes=[1, 2, 4],
            repeats=1, matmul_n=256, matmul_reps=3, precision_prompts=2, logits_prompts=4, logits_batch=2,
            noise_targets=2, noise_batch=4, noise_reads=3, lora_chunks=4, lora_len_lo=170, lora_len_hi=230,
            lora_steps=2, cpu_device_gib=0.012, cost_scale=0.0)
RATE_KEYS = ("device", "readout_slot_tokens_per_s", "readout_full_vocab_tokens_per_s",
             "readout_grade_rows_tokens_per_s", "train_tokens_per_s", "matmul_bf16_flops_per_s")

__all__ = ["FLOPS_FORMULA", "FULL", "PART_COST_S", "PART_ORDER", "RATE_KEYS", "TINY", "kendall_discordance",
           "main", "rates", "sequence_flops", "skip_reason", "summary", "tau_psi_of_reads"]


def prepare_imports() -> dict:
    """What this image allows: score_job needs polars, the other parts do not."""
    try:
        import polars  # noqa: F401
        have_polars = True
    except ImportError:
        have_polars = False
    return {"polars": have_polars}


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
    # presdep's default adapters (float32) with checkpointing: what the plan prices a training step at
    ran = [s for s in parts.get("lora", {}).get("settings", [])
           if s.get("gradient_checkpointing") and s.get("adapter_weights", "float32") == "float32"
           and s.get("tokens_per_s") is not None]
    if ran:
        row = min(ran, key=lambda s: s["padding_mask"])  # without the mask (the CUDA default) where it ran
        out["train_tokens_per_s"] = row["tokens_per_s"]
        src["train"] = {"gradient_checkpointing": True, "padding_mask": row["padding_mask"],
                        "adapter_weights": "float32", "micro_batches": row["micro_batches"],
                        "tokens_per_s": "the last of the setting's timed steps (the first includes the warm-up)"}
    return out, src


def skip_reason(name: str, left: float, scale: float) -> str | None:
    """Why part ``name`` does not start with ``left`` seconds of the budget left (None: it starts).
    ``scale`` is the shape's share of PART_COST_S (0 for the tiny shape: only a spent budget stops it)."""
    need = PART_MIN_S.get(name, PART_COST_S[name]) * scale
    if left <= 0:
        return f"seconds budget spent ({-left:.0f} s over) before this part"
    if need > left:
        return f"seconds budget: {left:.0f} s left, this part needs an estimated {need:.0f} s"
    return None


def _parse_sizes(text: str) -> list[int]:
    sizes = [int(x) for x in text.split(",") if x.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes are positive integers, got {text!r}")
    return sizes


def _write_json(path: Path, result: dict) -> None:
    """Atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny shape (2 layers, hidden 64, ~200-token prompts): "
                                                        "with --device cpu, the smoke run")
    ap.add_argument("--batch-sizes", type=_parse_sizes, default=None, help="comma-separated (default 1,...,32)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per batch size (default 3, tiny 1)")
    ap.add_argument("--lora-steps", type=int, default=None,
                    help="timed steps per LoRA setting, the first including the warm-up (default 2)")
    ap.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                    help="the main model's dtype; auto: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--budget-s", "--seconds-budget", dest="budget_s", type=float, default=DEFAULT_BUDGET_S,
                    help="total seconds: a part, batch size or LoRA setting starts only if its estimate fits in "
                         "what is left; the rest are recorded as skipped, with the reason")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the output JSON (its folder is created)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    deadline = t_start + args.budget_s
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
    shape["pool"] = max(shape["pool"], max(args.batch_sizes), shape["noise_batch"], shape["logits_prompts"])
    device = torch.device(args.device)
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
             "bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    rng = np.random.default_rng(args.seed)

    t0 = time.perf_counter()
    model = build_model(shape, device, dtype, args.seed)
    synth = SyntheticPrompts(shape["vocab"], shape["B"], shape["prefix"], shape["header"], rng)
    pool = synth.pool(shape["pool"], shape["len_lo"], shape["len_hi"])
    build_s = time.perf_counter() - t0

    scale = shape["cost_scale"]
    result: dict = {
        "benchmark": "gpu", "shape_name": "tiny" if args.tiny else "Qwen3-4B (random weights)",
        "shape": {k: shape[k] for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "B",
                                        "len_lo", "len_hi", "pool", "noise_batch")},
        "model_class": type(model).__name__, "attn_implementation": model.config._attn_implementation,
        "dtype": str(dtype).replace("torch.", ""), "grade_token_ids": list(synth.grade_ids), "pad_id": synth.pad_id,
        "seconds_budget": args.budget_s, "seed": args.seed,
        "budget": {"seconds": args.budget_s, "order": list(PART_ORDER),
                   "estimated_s": {k: PART_COST_S[k] * scale for k in PART_ORDER},
                   "first_piece_s": {k: v * scale for k, v in PART_MIN_S.items()},
                   "rule": "cheapest first; a part starts only if its estimate (first_piece_s for the divisible "
                           "readout and lora) fits in what is left; readout leaves lora its estimate; after "
                           "their first, a batch size or LoRA setting starts only if the slowest so far would end "
                           "in time"},
        "environment": _environment(device), "imports": imports, "model_build_s": build_s,
        "parts": {}, "elapsed_s_per_part": {}, "skipped": {},
    }

    def progress(name: str) -> Callable[[dict], None]:
        def write(partial: dict) -> None:  # a divisible part's figures so far, should the run be killed
            result["parts"][name] = {**partial, "partial": True}
            _write_json(args.out, result)
        return write

    def reserve_after(name: str) -> float:  # what the later parts are estimated to need
        return sum(PART_COST_S[k] for k in PART_ORDER[PART_ORDER.index(name) + 1 :]) * scale

    runs: dict[str, Callable[[], dict]] = {
        "precision": lambda: part_precision(model, synth, pool, shape, device),
        "grade_logits": lambda: part_grade_logits(model, synth, pool, shape, device),
        "score_job": lambda: part_score_job(device),
        "noise": lambda: part_noise(model, synth, pool, shape, device, rng),
        "readout": lambda: part_readout(model, synth, pool, shape, args, device, deadline - reserve_after("readout"),
                                        progress("readout")),
        # lora injects adapters into the model itself: last, whatever its cost
        "lora": lambda: part_training(model, synth, shape, args, device, rng, deadline, progress("lora")),
    }
    assert PART_ORDER[-1] == "lora" and set(runs) == set(PART_ORDER)
    for name in PART_ORDER:
        why = "polars not installed" if name == "score_job" and not imports["polars"] else \
            skip_reason(name, deadline - time.perf_counter(), scale)
        if why:
            result["parts"][name] = {"skipped": why}
            result["skipped"][name] = why
            _write_json(args.out, result)
            continue
        t0 = time.perf_counter()
        try:
            result["parts"][name] = runs[name]()
        except Exception as exc:  # noqa: BLE001 - one failing part must not lose the others' figures
            traceback.print_exc()
            why = f"failed: {type(exc).__name__}: {exc}"[:500]
            result["parts"][name] = {**result["parts"].get(name, {}), "skipped": why}  # keeps partial figures
            result["skipped"][name] = why
            _write_json(args.out, result)
            continue
        result["elapsed_s_per_part"][name] = time.perf_counter() - t0
        print(f"[gpu benchmark] {name}: {result['elapsed_s_per_part'][name]:.1f} s", file=sys.stderr, flush=True)
        part = result["parts"][name]
        if name == "readout" and part["skipped_batch_sizes"]:
            result["skipped"]["readout batch sizes"] = f"{part['skipped_batch_sizes']}: seconds budget"
        if name == "lora" and any("skipped" in s for s in part["settings"]):
            result["skipped"]["lora settings"] = "; ".join(
                f"{s['adapter_weights']} ckpt {s['gradient_checkpointing']} mask {s['padding_mask']}: {s['skipped']}"
                for s in part["settings"] if "skipped" in s)
        _write_json(args.out, result)  # each finished part is on disk, should a later one be killed
    result["elapsed_s"] = time.perf_counter() - t_start
    result["rates"], result["rates_from"] = rates(result)
    _write_json(args.out, result)
    print(summary(result))
    print(f"figures written to {args.out}")
    return result


if __name__ == "__main__":
    main()
