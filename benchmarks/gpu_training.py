"""The ``lora`` part of benchmarks/gpu.py: the LoRA training step as the loop runs it, measured
against the memory model's prediction.

OC-SFT on ``lora_chunks`` chunks of B documents (two in-chunk views each: 2 x chunks prompts of
paper length on the full shape), read in micro-batches as ``presdep.training.train_step`` cuts
them: items sorted by length, cut by the memory model's budget for this device (less the
default margin), an item's two views in one micro-batch, each micro-batch's loss divided by the
step's denominators, gradients accumulated, one AdamW step. Settings (SETTINGS, in order of
interest): checkpointing on without the padding mask (the CUDA default) with float32 adapters;
the same with the adapters cast to bfloat16 and dropout 0; checkpointing off; checkpointing on
with the mask (the former path); bf16 autocast over float32 adapters, dropout 0 (train_step's
``lora_compute_dtype: bfloat16``). Each setting times every one of its steps (the first includes
the warm-up), and gives the allocated and the reserved peak (CUDA) beside the predicted one, and
the SDPA backend a probe of the same attention shape runs (flash needs no explicit mask).
Only polars-free presdep modules are imported (a stock GPU image has no polars).
"""

from __future__ import annotations

import contextlib
import statistics
import time
import traceback
from typing import Any, Callable

import torch
from gpu_common import free, is_oom, peak_gib, peak_reserved_gib, reset_peak, sync

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
GIB = 2**30
_F32 = {"adapter_dtype": "float32", "adapter_weights": "float32", "dropout": 0.05}  # presdep's default adapters
# In order of interest: a run short of time drops the tail. adapter_dtype is what the LoRA matmuls run
# in; adapter_weights what the adapter parameters (and so AdamW's state) are held in.
SETTINGS = (
    {"gradient_checkpointing": True, "padding_mask": False, **_F32},  # the CUDA default: the plan's train rate
    # bf16 adapters: the parameters cast, no dropout (no mask drawn, no fp32 copy of each LoRA input)
    {"gradient_checkpointing": True, "padding_mask": False, "adapter_dtype": "bfloat16", "adapter_weights": "bfloat16",
     "dropout": 0.0},
    {"gradient_checkpointing": False, "padding_mask": False, **_F32},
    {"gradient_checkpointing": True, "padding_mask": True, **_F32},  # the former path
    # train_step's lora_compute_dtype: bfloat16 (autocast over float32 adapters), dropout 0 as above
    {"gradient_checkpointing": True, "padding_mask": False, "adapter_dtype": "bfloat16",
     "adapter_weights": "float32 + autocast", "dropout": 0.0},
)


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


def set_adapters(peft_model: Any, dtype: torch.dtype, dropout: float) -> None:
    """Every LoRA layer's adapter weights to ``dtype`` and its dropout to ``dropout`` (peft's
    ``nn.Identity`` at 0, as ``LoraConfig(lora_dropout=0)`` builds it, so no mask is drawn)."""
    for module in peft_model.modules():
        drops = getattr(module, "lora_dropout", None)
        if isinstance(drops, torch.nn.ModuleDict):
            for name in list(drops.keys()):
                drops[name] = torch.nn.Dropout(p=dropout) if dropout > 0 else torch.nn.Identity()
        for attr in ("lora_A", "lora_B"):
            mods = getattr(module, attr, None)
            if isinstance(mods, torch.nn.ModuleDict):
                mods.to(dtype)


def _row_keys(setting: dict) -> dict:
    return {k: setting[k] for k in ("gradient_checkpointing", "padding_mask", "adapter_dtype", "adapter_weights",
                                    "dropout")}


class _LoraBench:
    """The adapters, the step's chunks and their cut: what every setting shares."""

    def __init__(self, model: Any, synth: Any, shape: dict, device: Any, rng: Any):
        from presdep.training.lora import add_lora
        from presdep.training.memory_model import ModelShape
        from presdep.training.objectives import OCSFT, QueryList

        self.synth, self.device, self.B = synth, device, shape["B"]
        self.spec = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": LORA_TARGETS}
        self.peft_model = add_lora(model, self.spec, seed=1)  # injects the adapters into ``model`` itself
        self.lm = self.peft_model.get_base_model()
        self.lm.config.use_cache = False
        self.obj = OCSFT(self.B, [0, 1], lam=1.0)
        self.queries, doc_tokens = [], []
        for c in range(shape["lora_chunks"]):
            doc_tokens.append(synth.documents(int(rng.integers(shape["lora_len_lo"], shape["lora_len_hi"] + 1))))
            labels = tuple(float(x) for x in rng.integers(0, 4, size=self.B))
            self.queries.append(QueryList(f"q{c}", f"query {c}", tuple(f"d{i}" for i in range(self.B)),
                                          tuple(f"doc {i}" for i in range(self.B)), labels, labels))
        self.items = self.obj.items(self.queries, 0)  # one B-chunk per query, views = two in-chunk shuffles
        self.built = [[synth.prompt([doc_tokens[it.query][i] for i in v]) for v in it.views] for it in self.items]
        self.sizes = [(len(pair), max(len(p.ids) for p in pair)) for pair in self.built]
        self.longest = max(s for _, s in self.sizes)
        self.tokens = sum(len(p.ids) for pair in self.built for p in pair)
        self.norms = self.obj.normalizers(self.queries, self.items)
        self.grades = torch.arange(4, dtype=torch.float32, device=device)
        self.mshape = ModelShape.from_config(self.lm.config.to_dict())
        self.base_dtype = next(self.lm.parameters()).dtype
        self.total = (int(torch.cuda.mem_get_info(device)[1]) if torch.device(device).type == "cuda"
                      else int(shape["cpu_device_gib"] * GIB))

    def step(self, k: int, micro: list, masked: bool, opt: Any, params: list, autocast: bool) -> None:
        """One optimiser step over the micro-batches, as train_step runs it."""
        from presdep.scoring.readout import pad_batch, slot_grade_logits

        opt.zero_grad(set_to_none=True)
        for mb in micro:
            prompts = [p for i in mb.items for p in self.built[i]]
            ids, mask, reads, _ = pad_batch(prompts, self.synth.pad_id, self.device)
            with (torch.autocast(device_type=torch.device(self.device).type, dtype=torch.bfloat16) if autocast
                  else contextlib.nullcontext()):
                logits = slot_grade_logits(self.lm, ids, mask if masked else None, reads, self.synth.grade_ids)
            flat = [torch.softmax(logits[j, : len(p.read_positions)].float(), dim=-1) @ self.grades
                    for j, p in enumerate(prompts)]
            scores = [flat[2 * j : 2 * j + 2] for j in range(len(mb.items))]
            loss, _ = self.obj.loss(self.queries, [self.items[i] for i in mb.items], scores, k, norms=self.norms)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sync(self.device)

    def run(self, row: dict, setting: dict, n_steps: int) -> None:
        """One setting's figures into ``row``: the memory model's cut and prediction, the timed steps."""
        from presdep.training.memory_model import MemorySettings, micro_batch_budget, predict_peak
        from presdep.training.micro_batches import cut_micro_batches

        ckpt, masked, dev = setting["gradient_checkpointing"], setting["padding_mask"], self.device
        set_adapters(self.peft_model, torch.bfloat16 if setting["adapter_weights"] == "bfloat16" else torch.float32,
                     setting["dropout"])
        set_checkpointing(self.lm, ckpt)
        params = [p for p in self.peft_model.parameters() if p.requires_grad]
        # The memory model knows train_step's bf16 mode (autocast, float32 master weights); the cast row is
        # predicted as that, its master weights and optimizer state being a small part of the peak.
        ms = MemorySettings(adapter_dtype=setting["adapter_dtype"], dropout=setting["dropout"],
                            checkpoint_every_layers=1 if ckpt else 0,
                            base_dtype=str(self.base_dtype).replace("torch.", ""), masked=masked,
                            device=torch.device(dev).type)
        budget = micro_batch_budget(self.mshape, ms, device_bytes=self.total, margin=0.1, prompt_tokens=self.longest,
                                    reads_per_prompt=self.B)
        row.update({"adapter_param_dtype": str(params[0].dtype).replace("torch.", ""), "micro_batch_tokens": budget,
                    "sdpa_backend_probe": sdpa_backend(dev, self.base_dtype, self.mshape.heads, self.mshape.head_dim,
                                                       self.longest, masked)})
        try:
            micro = cut_micro_batches(self.sizes, budget)
        except ValueError as exc:  # not even one chunk fits: what the loop would refuse
            row.update({"fits": False, "error": str(exc)[:300]})
            return
        largest = max(micro, key=lambda m: m.padded_tokens)
        pred = predict_peak(self.mshape, ms, tokens=largest.padded_tokens, prompts=largest.prompts,
                            read_rows=largest.prompts * self.B)
        row.update({"fits": True, "micro_batches": len(micro), "padded_tokens": sum(m.padded_tokens for m in micro),
                    "predicted_peak_gib": pred.gib})
        opt = torch.optim.AdamW(params, lr=2e-4, betas=(0.9, 0.95), weight_decay=0.01)  # fresh: state in step 1
        try:
            reset_peak(dev)
            times = []
            for k in range(n_steps):  # every step timed: the first one's excess is the warm-up
                t0 = time.perf_counter()
                self.step(k, micro, masked, opt, params, setting["adapter_weights"] == "float32 + autocast")
                times.append(time.perf_counter() - t0)
            measured, reserved = peak_gib(dev), peak_reserved_gib(dev)
            mean = statistics.mean(times)
            row.update({"seconds_per_step_all": times, "seconds_first_step": times[0],
                        "seconds_last_step": times[-1], "seconds_per_step": mean,
                        "tokens_per_s": self.tokens / times[-1], "tokens_per_s_mean": self.tokens / mean,
                        "peak_memory_gib": measured, "peak_reserved_gib": reserved, "oom": False,
                        "measured_over_predicted": None if measured is None else measured / pred.gib,
                        "reserved_over_predicted": None if reserved is None else reserved / pred.gib})
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc):
                raise
            row.update({"oom": True, "error": str(exc).splitlines()[0][:300],
                        "peak_memory_gib": peak_gib(dev), "peak_reserved_gib": peak_reserved_gib(dev)})
        finally:
            opt.zero_grad(set_to_none=True)


def part_training(model: Any, synth: Any, shape: dict, args: Any, device: Any, rng: Any,
                  deadline: float | None = None, progress: Callable[[dict], None] | None = None) -> dict:
    """SETTINGS in order, ``args.lora_steps`` timed steps each. After the first, a setting starts only if
    the slowest one so far would end before ``deadline`` (perf_counter); the rest are recorded as skipped.
    ``progress`` gets the part's figures so far after each setting (written at once)."""
    bench = _LoraBench(model, synth, shape, device, rng)
    out: dict = {"lora": bench.spec, "objective": bench.obj.describe(), "batch_chunks": shape["lora_chunks"],
                 "prompts_per_step": 2 * shape["lora_chunks"], "tokens_per_step": bench.tokens,
                 "device_gib": bench.total / GIB, "steps_per_setting": args.lora_steps,
                 "trainable_params": sum(p.numel() for p in bench.peft_model.parameters() if p.requires_grad),
                 "how": "presdep.training.train_step's cut: sorted items, the memory model's budget (margin 0.1), "
                        "both views of a chunk in one micro-batch, the step's denominators, one AdamW step",
                 "timing": "each setting: a fresh AdamW, then steps_per_setting steps, each timed; the first "
                           "includes the warm-up (AdamW state, kernel selection, allocator growth); tokens_per_s "
                           "is the last step's, tokens_per_s_mean the mean step's",
                 "memory": "peak_memory_gib = torch.cuda.max_memory_allocated, peak_reserved_gib = "
                           "torch.cuda.max_memory_reserved, both reset (cache emptied) before the setting's first "
                           "step; null off CUDA",
                 "settings": []}
    bench.peft_model.train()
    slowest = 0.0  # seconds of the slowest setting so far: the estimate of the next one
    for setting in SETTINGS:
        row: dict = _row_keys(setting)
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and out["settings"] and slowest > left:  # the first one always: the part started
            row["skipped"] = (f"seconds budget: {max(left, 0):.0f} s left, the slowest setting so far took "
                              f"{slowest:.0f} s")
            out["settings"].append(row)
            continue
        t_row = time.perf_counter()
        try:
            bench.run(row, setting, args.lora_steps)
        except Exception as exc:  # noqa: BLE001 - one failing setting must not lose the others' figures
            traceback.print_exc()
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        free(device)
        row["elapsed_s"] = time.perf_counter() - t_row
        slowest = max(slowest, row["elapsed_s"])
        out["settings"].append(row)
        if progress is not None:
            progress(out)
    set_checkpointing(bench.lm, False)
    set_adapters(bench.peft_model, torch.float32, bench.spec["dropout"])
    return out
