"""Measured activation memory of a LoRA training step, per token per decoder layer (CPU).

Builds the student architecture from its config at its TRUE layer width but with few layers
(layers are identical: the figure of one layer is the difference between an n- and an
(n+1)-layer model, which also cancels embeddings, head and rotary tables), wraps it with peft
LoRA as :func:`presdep.training.lora.add_lora` does, and runs the forward training runs:
:func:`presdep.scoring.readout.slot_grade_logits` (decoder -> hidden at the read rows -> LM head
rows) on random token ids, then the backward of a loss on the grade logits. Per setting (row):

* saved: bytes saved for backward, from ``torch.autograd.graph.saved_tensors_hooks`` (each
  storage counted once by ``data_ptr``; storages of model parameters left out: a frozen weight a
  matmul keeps is no activation memory). The per-layer attention mask that SDPA makes from a
  boolean padding mask ([B, 1, T, T], grows with T) is reported apart.
* retained: bytes the CPU allocator still holds after the forward (torch.profiler memory
  events summed in time order), the cross-check of ``saved`` and the only figure under
  gradient checkpointing (whose layers keep their tensors out of sight of outer hooks).
* transient: the backward's peak above what the forward retained, per token (the largest
  backward intermediates; with checkpointing also the recomputed layer), LoRA gradients
  allocated before the measured step so that only activations count.

Prints a table (KiB per token per layer) with the analytic count of
:mod:`presdep.training.memory_model` beside the measured one, and writes JSON.

    python benchmarks/memory_model.py [--shape qwen3-4b | --config config.json] [--tokens 512]
        [--out FILE.json] [--write-constants] [--quick]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime as _dt
import functools
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from presdep.training import memory_model as mm  # noqa: E402

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj")
GRADE_IDS = (11, 12, 13, 14)



def _qwen3(hidden: int, inter: int, heads: int, layers: int, tied: bool = True) -> dict:
    return dict(model_type="qwen3", hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                num_key_value_heads=8, head_dim=128, num_hidden_layers=layers, vocab_size=151936,
                tie_word_embeddings=tied)


# config.json fields (transformers' names) of some students; recorded in the constants file too, so
# that ``presdep plan`` knows their shapes before they are fetched (memory_model.known_shape).
RECORDED_CONFIGS: dict[str, dict] = {
    "Qwen/Qwen3-0.6B": _qwen3(1024, 3072, 16, 28), "Qwen/Qwen3-1.7B": _qwen3(2048, 6144, 16, 28),
    "Qwen/Qwen3-4B": _qwen3(2560, 9728, 32, 36), "Qwen/Qwen3-8B": _qwen3(4096, 12288, 32, 36, tied=False),
}
SHAPES: dict[str, dict] = {
    **{rid.split("/")[-1].lower(): cfg for rid, cfg in RECORDED_CONFIGS.items()},
    "tiny": dict(model_type="qwen3", hidden_size=256, intermediate_size=768, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, num_hidden_layers=2, vocab_size=512, tie_word_embeddings=True),
}
SMALL_VOCAB = 512  # embeddings and head cancel in the layer difference: a small vocabulary suffices


def row_settings(quick: bool) -> list[tuple[str, mm.MemorySettings, str]]:
    """(label, settings, mask kind) per row; mask kind: none | ones (all-ones mask) | pad (right padding)."""
    S = functools.partial(mm.MemorySettings, device="cpu")  # measured here: CPU dropout masks
    rows = [("frozen base, no LoRA", S(lora_r=0, masked=False), "none")]
    for adapter, drop in (("float32", 0.05), ("bfloat16", 0.05), ("float32", 0.0), ("bfloat16", 0.0)):
        rows.append((f"LoRA r16 {adapter} dropout {drop:g}", S(adapter_dtype=adapter, dropout=drop, masked=False),
                     "none"))
        rows.append((f"LoRA r16 {adapter} dropout {drop:g}, padded mask",
                     S(adapter_dtype=adapter, dropout=drop, masked=True), "pad"))
    rows.append(("LoRA r16 float32 dropout 0.05, all-ones mask", S(masked=False), "ones"))
    for adapter, drop in (("float32", 0.05), ("bfloat16", 0.05), ("float32", 0.0), ("bfloat16", 0.0)):
        rows.append((f"checkpointed, LoRA r16 {adapter} dropout {drop:g}",
                     S(adapter_dtype=adapter, dropout=drop, masked=False, checkpoint_every_layers=1), "none"))
    rows.append(("checkpointed, LoRA r16 float32 dropout 0.05, padded mask",
                 S(masked=True, checkpoint_every_layers=1), "pad"))
    if quick:  # frozen; fp32 dropout unmasked, padded, all-ones; bf16 dropout; checkpointed unmasked, padded
        rows = [r for i, r in enumerate(rows) if i in {0, 1, 2, 3, 9, 10, 14}]
    return rows


def hf_config(fields: dict, layers: int):
    import transformers

    d = dict(fields)
    d.update(num_hidden_layers=layers, vocab_size=SMALL_VOCAB, use_cache=False)
    model_type = d.pop("model_type", "qwen3")
    for k in ("architectures", "torch_dtype", "dtype", "transformers_version", "layer_types", "max_window_layers"):
        d.pop(k, None)
    cfg = transformers.AutoConfig.for_model(model_type, **d)
    cfg._attn_implementation = "sdpa"
    return cfg


def base_model(fields: dict, layers: int, base_dtype: str):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = hf_config(fields, layers)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=getattr(torch, base_dtype))
    model.config.use_cache = False
    return model


def prepare(base, s: mm.MemorySettings):
    """A copy of ``base`` set up as training runs it under settings ``s`` (LoRA as add_lora does)."""
    from presdep.training.lora import add_lora, enable_checkpointing

    model = copy.deepcopy(base)
    if s.checkpoint_every_layers:
        enable_checkpointing(model, s.checkpoint_every_layers)
    if s.lora_r == 0:
        for p in model.parameters():
            p.requires_grad_(False)
        model.enable_input_require_grads()  # otherwise nothing is saved at all
    else:
        model = add_lora(model, {"r": s.lora_r, "alpha": 2 * s.lora_r, "dropout": s.dropout,
                                 "target_modules": list(s.lora_targets)}, seed=1)
        if s.adapter_dtype != "float32":
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.data = p.data.to(getattr(torch, s.adapter_dtype))
    model.train()
    return model


def _memory_trace(prof) -> list[tuple[int, int]]:
    """(time ns, bytes) of every CPU allocation (+) and free (-) the profiler saw, in time order."""
    events = prof.profiler.kineto_results.events()
    return sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")


def step_memory(model, tokens: int, mask_kind: str, *, hooks: bool) -> dict:
    """One training forward + backward: saved bytes (hooks), retained after forward, backward peak above it."""
    from torch.profiler import ProfilerActivity, profile

    from presdep.scoring.readout import slot_grade_logits

    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    trainable = [p for p in model.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, SMALL_VOCAB, (1, tokens), generator=gen)
    mask = None
    if mask_kind in ("ones", "pad"):
        mask = torch.ones(1, tokens, dtype=torch.long)
        if mask_kind == "pad":
            mask[0, -max(1, tokens // 16):] = 0
    reads = torch.tensor([[tokens // 2, tokens // 2 + 7, tokens // 2 + 14, tokens // 2 + 21]])

    def run(pack=None):
        if pack is None:
            out = slot_grade_logits(lm, ids, mask, reads, GRADE_IDS)
        else:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = slot_grade_logits(lm, ids, mask, reads, GRADE_IDS)
        return torch.softmax(out.float(), -1)[..., 3].sum()

    # Warm-up step: allocates the LoRA gradients (kept) so the measured step counts activations only.
    loss = run()
    if loss.requires_grad:
        loss.backward()
    del loss

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    params |= {p.grad.untyped_storage().data_ptr() for p in trainable if p.grad is not None}
    saved: dict[int, int] = {}
    mask_saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in params and ptr not in saved:
            saved[ptr] = st.nbytes()
            if t.dim() == 4 and t.shape[1] == 1 and t.shape[-1] == tokens and t.shape[-2] == tokens:
                mask_saved[ptr] = st.nbytes()
        return t

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = run(pack if hooks else None)
        with torch.profiler.record_function("memory_model::backward"):
            loss.backward()
        del loss
    trace = _memory_trace(prof)
    mark = next((e.start_ns() for e in prof.profiler.kineto_results.events()
                 if e.name() == "memory_model::backward"), None)
    level, fwd_peak, retained, bwd_peak, in_bwd = 0, 0, 0, 0, False
    for t, b in trace:
        if not in_bwd and mark is not None and t >= mark:
            in_bwd, retained = True, level
        level += b
        if in_bwd:
            bwd_peak = max(bwd_peak, level)
        else:
            fwd_peak = max(fwd_peak, level)
    return {"saved": sum(saved.values()), "mask_saved": sum(mask_saved.values()), "retained": retained,
            "forward_peak": fwd_peak, "backward_peak": bwd_peak, "transient": bwd_peak - retained}


def measure(fields: dict, tokens: int, layers: tuple[int, int], rows, log=print) -> list[dict]:
    """Each row at ``layers[0]`` and ``layers[1]`` layers; per-layer figures from the difference."""
    small, big = layers
    bases = {n: base_model(fields, n, "bfloat16") for n in (small, big)}
    out = []
    for label, s, mask_kind in rows:
        t0 = time.perf_counter()
        m = {}
        for n in (small, big):
            model = prepare(bases[n], s)
            with _quiet_stderr():
                m[n] = step_memory(model, tokens, mask_kind, hooks=not s.checkpoint_every_layers)
            del model
        dl = big - small
        per = {k: (m[big][k] - m[small][k]) / dl / tokens for k in ("saved", "mask_saved", "retained")}
        row = {"label": label, "mask": mask_kind, "key": mm.settings_key(s),
               "settings": {**dataclasses.asdict(s), "lora_targets": list(s.lora_targets)},
               "tokens": tokens, "layers": list(layers),
               "saved_per_token_per_layer": per["saved"],
               "mask_per_token_per_layer": per["mask_saved"],
               "retained_per_token_per_layer": per["retained"],
               "forward_transient_per_token": (m[big]["forward_peak"] - m[big]["retained"]) / tokens,
               "backward_transient_per_token": m[big]["transient"] / tokens,
               "raw": {str(n): m[n] for n in (small, big)}, "seconds": round(time.perf_counter() - t0, 1)}
        out.append(row)
        log(f"  measured {label} ({row['seconds']} s)")
    return out


class _quiet_stderr:
    """The profiler's C++ side prints start/stop lines on fd 2: silence them."""

    def __enter__(self):
        import os

        sys.stderr.flush()
        self.saved = os.dup(2)
        self.null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(self.null, 2)

    def __exit__(self, *exc):
        import os

        os.dup2(self.saved, 2)
        os.close(self.saved)
        os.close(self.null)


def main(argv: list[str] | None = None) -> dict:
    import warnings

    import peft
    import transformers

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="qwen3-4b", choices=sorted(SHAPES))
    ap.add_argument("--config", type=Path, default=None, help="an HF config.json (or its folder) instead of --shape")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--layers", type=int, nargs=2, default=(1, 2), metavar=("N", "N_PLUS"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--write-constants", action="store_true",
                    help=f"write the measured constants to {mm.CONSTANTS_PATH.relative_to(REPO)} (replacing its "
                         "entries: one shape per file, the student's)")
    ap.add_argument("--quick", action="store_true", help="tiny shape, few rows, 64 tokens (a smoke test)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(args.threads)
    if args.quick:
        args.shape, args.tokens = "tiny", 64
    if args.config:
        path = args.config / "config.json" if args.config.is_dir() else args.config
        fields, name = json.loads(path.read_text(encoding="utf-8")), str(path)
    else:
        fields, name = dict(SHAPES[args.shape]), args.shape
    shape = mm.ModelShape.from_config(fields)
    rows = row_settings(args.quick)
    print(f"{name}: hidden {shape.hidden}, intermediate {shape.intermediate}, heads {shape.heads}/{shape.kv_heads}"
          f" x {shape.head_dim}; T = {args.tokens}, layers {args.layers[0]} vs {args.layers[1]}; bf16 base, SDPA, CPU")
    measured = measure(fields, args.tokens, tuple(args.layers), rows)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
    report = {"shape_name": name, "shape": {k: getattr(shape, k) for k in mm.ModelShape.__dataclass_fields__},
              "tokens": args.tokens, "versions": versions, "date": _dt.date.today().isoformat(), "device": "cpu",
              "rows": measured}
    summarize(shape, measured)
    print_table(measured)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    if args.write_constants:
        constants = build_constants(report)
        mm.CONSTANTS_PATH.write_text(json.dumps(constants, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {mm.CONSTANTS_PATH}")
    return report


def _cpu(s: dict) -> mm.MemorySettings:
    return mm.MemorySettings(**{**s, "lora_targets": tuple(s["lora_targets"]), "device": "cpu"})


def summarize(shape: mm.ModelShape, rows: list[dict]) -> None:
    """Adds to each row its per-layer and transient figures, measured and analytic (bytes per token).

    Per layer: saved (hooks) without checkpointing, retained with it. Transient: the larger of the
    forward's and the backward's peak above what the forward retained; with checkpointing less
    the recomputed layer's own saved bytes (those of the same row without checkpointing).
    """
    plain = {r["key"]: r for r in rows if not r["settings"]["checkpoint_every_layers"] and r["mask"] != "ones"}
    for r in rows:
        s = _cpu(r["settings"])
        peak = max(r["forward_transient_per_token"], r["backward_transient_per_token"])
        if s.checkpoint_every_layers:
            r["layer_measured"] = r["retained_per_token_per_layer"]
            r["layer_analytic"] = float(mm.DTYPE_BYTES[s.base_dtype] * shape.hidden)
            base = plain.get(r["key"])
            r["transient_measured"] = peak - base["saved_per_token_per_layer"] if base else None
        else:
            r["layer_measured"] = r["saved_per_token_per_layer"]
            r["layer_analytic"] = mm.analytic_layer_bytes(shape, s, tokens=r["tokens"])
            r["transient_measured"] = peak
        r["transient_analytic"] = mm.analytic_transient(shape, s)


def print_table(rows: list[dict]) -> None:
    kib = 1024.0

    def pct(a, m):
        return f"{100 * (a - m) / m:+6.1f}%" if m else "      -"

    print(f"\n{'setting':56s} {'saved':>7s} {'retained':>8s} {'analytic':>8s} {'diff':>7s}  "
          f"{'transient':>9s} {'fit':>7s} {'diff':>7s}")
    print(f"{'(KiB per token: per layer; transient per step)':56s}")
    for r in rows:
        tm = r["transient_measured"]
        print(f"{r['label'][:56]:56s} {r['saved_per_token_per_layer'] / kib:7.1f} "
              f"{r['retained_per_token_per_layer'] / kib:8.1f} {r['layer_analytic'] / kib:8.1f} "
              f"{pct(r['layer_analytic'], r['layer_measured'])}  "
              f"{(tm or 0) / kib:9.1f} {r['transient_analytic'] / kib:7.1f} {pct(r['transient_analytic'], tm)}")
    print("saved: hooks (checkpointed layers keep theirs out of sight); retained: allocator after the forward;"
          " analytic vs saved, or vs retained when checkpointed")


def build_constants(report: dict) -> dict:
    """The constants file: per settings key, the figures measured without and with checkpointing."""
    entries: dict[str, dict] = {}
    for r in report["rows"]:
        if r["mask"] == "ones":
            continue  # transformers drops an all-ones mask: the same as unmasked
        s = _cpu(r["settings"])
        e = entries.setdefault(r["key"], {"lora_targets": list(s.lora_targets)})
        if s.checkpoint_every_layers:
            e["checkpointed_bytes_per_token_per_layer"] = r["retained_per_token_per_layer"]
            peak = max(r["forward_transient_per_token"], r["backward_transient_per_token"])
            if "bytes_per_token_per_layer" in e:  # the recomputed layer's own saved tensors are not transient
                layer = e["bytes_per_token_per_layer"] + e["mask_bytes_per_token_per_layer"]
                e["checkpointed_transient_bytes_per_token"] = peak - layer
        else:
            e["bytes_per_token_per_layer"] = r["saved_per_token_per_layer"] - r["mask_per_token_per_layer"]
            e["mask_bytes_per_token_per_layer"] = r["mask_per_token_per_layer"]
            e["retained_bytes_per_token_per_layer"] = r["retained_per_token_per_layer"]
            e["transient_bytes_per_token"] = max(r["forward_transient_per_token"],
                                                 r["backward_transient_per_token"])
    return {"about": "Measured by benchmarks/memory_model.py --write-constants: bytes per token per decoder layer "
                     "saved for backward (padding-mask copy excluded), transients per token; CPU, bf16 base, SDPA.",
            "shape": report["shape"], "shape_name": report["shape_name"], "tokens": report["tokens"],
            "versions": report["versions"], "date": report["date"], "device": report["device"],
            "entries": entries, "recorded_configs": RECORDED_CONFIGS}


if __name__ == "__main__":
    main()
