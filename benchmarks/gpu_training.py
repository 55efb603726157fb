"""Part 4 of benchmarks/gpu.py: the LoRA training step as the loop runs it, measured against the
memory model's prediction.

OC-SFT on ``lora_chunks`` chunks of B documents (two in-chunk views each: 2 x chunks prompts of
paper length on the full shape), read in micro-batches as ``presdep.training.train_step`` cuts
them: items sorted by length, cut by the memory model's budget for this device (less the
default margin), an item's two views in one micro-batch, each micro-batch's loss divided by the
step's denominators, gradients accumulated, one AdamW step. Rows: checkpointing on without the
padding mask (the CUDA default), the same with the mask (the former path), checkpointing off.
Each row gives seconds and tokens per step, the measured peak (CUDA) beside the predicted one,
and the SDPA backend a probe of the same attention shape runs (flash needs no explicit mask).
Only polars-free presdep modules are imported (a stock GPU image has no polars).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from gpu_common import free, is_oom, peak_gib, reset_peak, sync

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
GIB = 2**30


def sdpa_backend(device: Any, dtype: Any, heads: int, head_dim: int, length: int, masked: bool) -> str:
    """The first SDPA backend (flash, memory-efficient, math) that runs a causal attention of this
    shape, with an explicit mask or with ``is_causal`` alone, as transformers calls it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, heads, length, head_dim, device=device, dtype=dtype)
    mask = torch.ones(length, length, device=device, dtype=torch.bool).tril() if masked else None
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("math", SDPBackend.MATH)):
        try:
            with sdpa_kernel([backend]):
                torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask, is_causal=mask is None)
            return name
        except RuntimeError:
            continue
    return "none"


def set_checkpointing(lm: Any, on: bool) -> None:
    """Activation (gradient) checkpointing, non-reentrant; transformers >= 5.2x names it activation_*."""
    if on:
        if hasattr(lm, "activation_checkpointing_enable"):
            lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif hasattr(lm, "activation_checkpointing_disable"):
        lm.activation_checkpointing_disable()
    else:
        lm.gradient_checkpointing_disable()


def part_training(model: Any, synth: Any, shape: dict, args: Any, device: Any, rng: Any,
                  deadline: float | None = None) -> dict:
    """The rows in order of interest; once ``deadline`` (perf_counter) has passed, the rest are
    recorded as skipped."""
    from presdep.scoring.readout import pad_batch, slot_grade_logits
    from presdep.training.lora import add_lora
    from presdep.training.memory_model import MemorySettings, ModelShape, micro_batch_budget, predict_peak
    from presdep.training.micro_batches import cut_micro_batches
    from presdep.training.objectives import OCSFT, QueryList

    B, chunks = shape["B"], shape["lora_chunks"]
    spec = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": LORA_TARGETS}
    peft_model = add_lora(model, spec, seed=1)  # injects the adapters into ``model`` itself
    lm = peft_model.get_base_model()
    lm.config.use_cache = False
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-4, betas=(0.9, 0.95), weight_decay=0.01)
    obj = OCSFT(B, [0, 1], lam=1.0)
    queries, doc_tokens = [], []
    for c in range(chunks):
        doc_tokens.append(synth.documents(int(rng.integers(shape["lora_len_lo"], shape["lora_len_hi"] + 1))))
        labels = tuple(float(x) for x in rng.integers(0, 4, size=B))
        queries.append(QueryList(f"q{c}", f"query {c}", tuple(f"d{i}" for i in range(B)),
                                 tuple(f"doc {i}" for i in range(B)), labels, labels))
    items = obj.items(queries, 0)  # one B-chunk per query, views A and B = two in-chunk shuffles
    built = [[synth.prompt([doc_tokens[it.query][i] for i in v]) for v in it.views] for it in items]
    sizes = [(len(pair), max(len(p.ids) for p in pair)) for pair in built]
    tokens = sum(len(p.ids) for pair in built for p in pair)
    norms = obj.normalizers(queries, items)
    grades = torch.arange(4, dtype=torch.float32, device=device)
    mshape = ModelShape.from_config(lm.config.to_dict())
    dtype_name = str(next(lm.parameters()).dtype).replace("torch.", "")
    total = (int(torch.cuda.mem_get_info(device)[1]) if torch.device(device).type == "cuda"
             else int(shape["cpu_device_gib"] * GIB))

    def step(k: int, micro: list, masked: bool) -> None:
        opt.zero_grad(set_to_none=True)
        for mb in micro:
            prompts = [p for i in mb.items for p in built[i]]
            ids, mask, reads, _ = pad_batch(prompts, synth.pad_id, device)
            logits = slot_grade_logits(lm, ids, mask if masked else None, reads, synth.grade_ids)
            flat = [torch.softmax(logits[j, : len(p.read_positions)].float(), dim=-1) @ grades
                    for j, p in enumerate(prompts)]
            scores = [flat[2 * j : 2 * j + 2] for j in range(len(mb.items))]
            loss, _ = obj.loss(queries, [items[i] for i in mb.items], scores, k, norms=norms)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sync(device)

    out: dict = {"lora": spec, "objective": obj.describe(), "batch_chunks": chunks, "prompts_per_step": 2 * chunks,
                 "tokens_per_step": tokens, "device_gib": total / GIB,
                 "trainable_params": sum(p.numel() for p in params),
                 "how": "presdep.training.train_step's cut: sorted items, the memory model's budget (margin 0.1), "
                        "both views of a chunk in one micro-batch, the step's denominators, one AdamW step",
                 "settings": []}
    peft_model.train()
    for ckpt, masked in ((True, False), (True, True), (False, False)):
        if deadline is not None and time.perf_counter() > deadline:
            out["settings"].append({"gradient_checkpointing": ckpt, "padding_mask": masked,
                                    "skipped": "seconds budget spent"})
            continue
        set_checkpointing(lm, ckpt)
        ms = MemorySettings(adapter_dtype="float32", dropout=0.05, checkpoint_every_layers=1 if ckpt else 0,
                            base_dtype=dtype_name, masked=masked, device=torch.device(device).type)
        budget = micro_batch_budget(mshape, ms, device_bytes=total, margin=0.1, prompt_tokens=max(s for _, s in sizes),
                                    reads_per_prompt=B)
        row: dict = {"gradient_checkpointing": ckpt, "padding_mask": masked, "micro_batch_tokens": budget,
                     "sdpa_backend_probe": sdpa_backend(device, next(lm.parameters()).dtype, mshape.heads,
                                                        mshape.head_dim, max(s for _, s in sizes), masked)}
        try:
            micro = cut_micro_batches(sizes, budget)
        except ValueError as exc:  # not even one chunk fits: what the loop would refuse
            row.update({"fits": False, "error": str(exc)[:300]})
            out["settings"].append(row)
            continue
        largest = max(micro, key=lambda m: m.padded_tokens)
        pred = predict_peak(mshape, ms, tokens=largest.padded_tokens, prompts=largest.prompts,
                            read_rows=largest.prompts * B)
        row.update({"fits": True, "micro_batches": len(micro), "padded_tokens": sum(m.padded_tokens for m in micro),
                    "predicted_peak_gib": pred.gib})
        try:
            reset_peak(device)
            step(0, micro, masked)  # warm-up step, not timed (allocates AdamW state)
            times = []
            for k in range(1, 1 + args.lora_steps):
                t0 = time.perf_counter()
                step(k, micro, masked)
                times.append(time.perf_counter() - t0)
            sps = statistics.mean(times)
            measured = peak_gib(device)
            row.update({"seconds_per_step": sps, "seconds_per_step_all": times, "tokens_per_s": tokens / sps,
                        "peak_memory_gib": measured, "oom": False,
                        "measured_over_predicted": None if measured is None else measured / pred.gib})
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc):
                raise
            row.update({"oom": True, "error": str(exc).splitlines()[0][:300]})
        opt.zero_grad(set_to_none=True)
        free(device)
        out["settings"].append(row)
    set_checkpointing(lm, False)
    return out
