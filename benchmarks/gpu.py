"""GPU benchmark: readout throughput and MFU, bf16 against fp32, the batch noise floor, one LoRA step, a CUDA score job.

One prepared run (well under 8 minutes on one H200) on a random ``Qwen3ForCausalLM`` of the
Qwen3-4B shape (36 layers, hidden 2560, 32 query / 8 key-value heads, head_dim 128, FFN 9728,
vocabulary 151,936, tied embeddings; bf16, SDPA). Prompts are random token ids shaped as the
skeleton builder shapes them: a header, B = 20 documents, then the answer skeleton with one read
position per slot (the token before each dummy grade); 4 fixed grade token ids. Each figure has
its own baseline, measured in the same process:

1. readout: prompt tokens/s through presdep's readout (``pad_batch`` + ``slot_grade_logits`` +
   ``grade_probs`` under ``torch.inference_mode``, length-sorted batches, as
   ``TransformersScorer.read_built`` does) per batch size, against a bare decoder forward
   (``model.model(input_ids)``, no LM head) of the same padded batches; MFU against the bf16
   matmul rate measured in this run; peak memory; OOM recorded per batch size.
2. precision: E[g] of a bf16 model against an fp32 copy of the same (bf16) weights.
3. noise floor: the same prompts read alone and inside batches with other companions, padding and
   batch positions: |delta E[g]| against the alone read, and tau-PSI of the R batched reads.
4. the LoRA training step as the loop runs it (benchmarks/gpu_training.py; r 16, alpha 32, the six
   projections, OC-SFT on 32 chunks = 64 prompts of 2,600-3,200 tokens, micro-batches cut by the
   memory model's budget, AdamW): checkpointing on without and with the padding mask, and off;
   measured peak beside the predicted one, and the SDPA backend the attention shape runs.
5. a real ``presdep.scoring.run.score_dataset`` job on a tiny model saved to disk, on ``--device``
   (only where polars imports; else recorded as skipped).

It needs only what a stock GPU image has (torch, transformers, peft, numpy, pyyaml, tqdm): the parts
1-4 import presdep modules whose import chains need neither polars nor jsonschema (a test hides
both, and the workflow's other tools, and runs the script).

    python benchmarks/gpu.py [--device cuda] [--tiny] [--batch-sizes 1,2,4,8,16,32] [--repeats 3]
                             [--seconds-budget 480] [--out benchmarks/out/gpu.json]
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # a checkout run without installing presdep (a bare GPU image)
    sys.path.insert(0, str(REPO))

DEFAULT_OUT = REPO / "benchmarks" / "out" / "gpu.json"

# The Qwen3-4B shape, and a tiny one for CPU tests. Prompt lengths are totals (header + documents +
# skeleton); ``prefix`` is the tokens of one skeleton line before its grade ("[i] Grade: ").
FULL = dict(layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128, ffn=9728, vocab=151936,
            B=20, len_lo=2000, len_hi=2800, header=150, prefix=6, pool=32, batch_sizes=[1, 2, 4, 8, 16, 32],
            repeats=3, matmul_n=8192, matmul_reps=5, precision_prompts=4, noise_targets=4, noise_batch=8,
            noise_reads=6, lora_chunks=32, lora_len_lo=2600, lora_len_hi=3200, lora_steps=1, cpu_device_gib=0)
TINY = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512,
            B=20, len_lo=170, len_hi=230, header=20, prefix=3, pool=8, batch_sizes=[1, 2, 4],
            repeats=1, matmul_n=256, matmul_reps=3, precision_prompts=2, noise_targets=2, noise_batch=4,
            noise_reads=3, lora_chunks=4, lora_len_lo=170, lora_len_hi=230, lora_steps=1, cpu_device_gib=0.012)

FLOPS_FORMULA = ("per sequence of L real tokens: 2 * N_nonembed * L + 2 * n_layers * L^2 * (n_heads * head_dim); "
                 "N_nonembed = all parameters but the token embedding (tied, so the LM head too, which the readout "
                 "runs on the B read rows only and the bare forward not at all); the attention term is QK^T and AV, "
                 "4 * n_layers * L^2 * d_attn, halved for the causal mask (d_attn = n_heads * head_dim, 4096 for "
                 "Qwen3-4B where hidden is 2560); padding tokens are not counted (mfu_padded counts them)")


# ---------------------------------------------------------------- imports on a stock GPU image


def prepare_imports() -> dict:
    """What this image allows: part 5 (a real score job) needs polars, parts 1-4 do not."""
    try:
        import polars  # noqa: F401
        have_polars = True
    except ImportError:
        have_polars = False
    return {"polars": have_polars}


# ---------------------------------------------------------------- figures


def kendall_discordance(a: Sequence[float], b: Sequence[float]) -> float:
    """Share of discordant pairs among all n(n-1)/2 document pairs of two score vectors.

    A pair tied in exactly one of the two reads counts one half; a pair tied in both counts 0
    (the reads agree). Without ties this is (1 - tau) / 2 with Kendall's tau (tau-a = tau-b).
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"two score vectors of one length >= 2 are needed, got {x.shape} and {y.shape}")
    i, j = np.triu_indices(len(x), 1)
    sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    discordant = np.count_nonzero(sx * sy < 0) + 0.5 * np.count_nonzero((sx == 0) != (sy == 0))
    return float(discordant / len(i))


def tau_psi_of_reads(reads: np.ndarray) -> float:
    """tau-PSI of R reads (R, n) of one presentation: the mean discordance over the R(R-1)/2 pairs of reads."""
    r = np.asarray(reads, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] < 2:
        raise ValueError(f"tau-PSI needs at least two reads (R, n), got shape {r.shape}")
    return float(np.mean([kendall_discordance(r[p], r[q]) for p in range(len(r)) for q in range(p + 1, len(r))]))


def sequence_flops(length: int, n_nonembed: int, layers: int, d_attn: int) -> float:
    """Model FLOPs of one causal forward over ``length`` tokens (see FLOPS_FORMULA)."""
    return 2.0 * n_nonembed * length + 2.0 * layers * float(length) ** 2 * d_attn


# ---------------------------------------------------------------- synthetic prompts


class SyntheticPrompts:
    """Random token-id prompts in the skeleton builder's layout (PromptIds: ids + read positions).

    ids = header + documents (newline-separated) + skeleton, where the skeleton is, per slot i,
    (a newline before slots 2..B) + the fixed tokens of "[i] Grade: " + the dummy grade "0"; the read
    position of slot i is its last prefix token, which predicts the grade (SkeletonBuilder.skeleton).
    """

    def __init__(self, vocab: int, B: int, prefix: int, header: int, rng: np.random.Generator):
        # Qwen's "0".."3" are ids 15..18 and "\n" is 198; a tiny vocabulary uses 15..18 and 19.
        self.grade_ids = (15, 16, 17, 18)
        self.newline = 198 if vocab > 1000 else 19
        self.pad_id = 151643 if vocab > 151643 else 0  # Qwen's <|endoftext|>
        self.vocab, self.B, self.rng = vocab, B, rng
        self.low = 200 if vocab > 1000 else 20  # random text ids avoid the special ids above
        self.header = self.tokens(header)
        self.prefixes = [self.tokens(prefix) for _ in range(B)]

    def tokens(self, n: int) -> list[int]:
        return [int(t) for t in self.rng.integers(self.low, min(self.vocab, 151643), size=max(1, int(n)))]

    def skeleton_len(self, n_slots: int) -> int:
        return sum(len(p) + 1 for p in self.prefixes[:n_slots]) + (n_slots - 1)

    def documents(self, total: int) -> list[list[int]]:
        """B random documents sized so the whole prompt has about ``total`` tokens."""
        body = max(self.B, total - len(self.header) - self.skeleton_len(self.B) - (self.B - 1))
        share = self.rng.dirichlet(np.full(self.B, 4.0))
        return [self.tokens(max(1, round(body * s))) for s in share]

    def prompt(self, docs: Sequence[Sequence[int]]):
        from presdep.scoring.template import PromptIds

        ids = list(self.header)
        for k, d in enumerate(docs):
            ids += ([self.newline] if k else []) + list(d)
        head = len(ids)
        reads = []
        for i in range(len(docs)):
            if i:
                ids.append(self.newline)
            ids += self.prefixes[i]
            reads.append(len(ids) - 1)
            ids.append(self.grade_ids[0])
        return PromptIds(ids=ids, read_positions=reads, n_prompt_tokens=head)

    def pool(self, n: int, lo: int, hi: int) -> list:
        return [self.prompt(self.documents(int(self.rng.integers(lo, hi + 1)))) for _ in range(n)]


# ---------------------------------------------------------------- the readout (as TransformersScorer.read_built)


def sync(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def read_batch(model: Any, prompts: Sequence[Any], pad_id: int, grade_ids: Sequence[int], device: Any) -> list:
    """One right-padded batch in the given order: P(grade) per slot, float64 [n_slots, 4] per prompt."""
    import torch

    from presdep.scoring.readout import grade_probs, pad_batch, slot_grade_logits

    with torch.inference_mode():
        ids, _, reads, _ = pad_batch(list(prompts), pad_id, device)
        # Right padding + causal attention: no mask needed (see slot_grade_logits).
        probs = grade_probs(slot_grade_logits(model, ids, None, reads, grade_ids)).cpu().numpy()
    return [probs[k, : len(p.read_positions)] for k, p in enumerate(prompts)]


def length_batches(built: Sequence[Any], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(built)), key=lambda i: -len(built[i].ids))  # similar lengths together
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def read_built(model: Any, built: Sequence[Any], batch_size: int, pad_id: int, grade_ids: Sequence[int],
               device: Any) -> list:
    """TransformersScorer.read_built's loop: length-sorted batches, results in input order."""
    out: list = [None] * len(built)
    for idx in length_batches(built, batch_size):
        for i, p in zip(idx, read_batch(model, [built[i] for i in idx], pad_id, grade_ids, device)):
            out[i] = p
    return out


def expected(probs: np.ndarray) -> np.ndarray:
    return np.asarray(probs, dtype=np.float64) @ np.arange(4, dtype=np.float64)


# ---------------------------------------------------------------- the model


def build_model(shape: dict, device: Any, dtype: Any, seed: int) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["ffn"],
                      num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                      num_key_value_heads=shape["kv_heads"], head_dim=shape["head_dim"],
                      max_position_embeddings=40960, tie_word_embeddings=True, use_cache=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):  # weights created and initialised on the device
        model = Qwen3ForCausalLM._from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def param_counts(model: Any) -> dict:
    total = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    embed = model.get_input_embeddings().weight.numel()
    return {"total": total, "embedding": embed, "non_embedding": total - embed}


def matmul_rate(device: Any, dtype: Any, n: int, reps: int) -> dict:
    """FLOP/s of a square matmul (2 n^3 per product), best of ``reps`` timed loops of 10."""
    import torch

    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    inner = 10
    for _ in range(3):
        torch.matmul(a, b)
    sync(device)
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.matmul(a, b)
        sync(device)
        rates.append(inner * 2.0 * n ** 3 / (time.perf_counter() - t0))
    del a, b
    return {"n": n, "dtype": str(dtype).replace("torch.", ""), "best_flops_per_s": max(rates),
            "median_flops_per_s": statistics.median(rates), "reps": reps, "products_per_rep": inner}


def _reset_peak(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: Any) -> float | None:
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return None


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _free(device: Any) -> None:
    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- part 1: readout throughput and MFU


def part_readout(model, synth, pool, shape, args, device, deadline) -> dict:
    import torch

    from presdep.scoring.readout import pad_batch

    counts = param_counts(model)
    cfg = model.config
    d_attn = cfg.num_attention_heads * cfg.head_dim
    rate = matmul_rate(device, next(model.parameters()).dtype, shape["matmul_n"], shape["matmul_reps"])
    peak = rate["best_flops_per_s"]

    def flops(lengths):
        return sum(sequence_flops(n, counts["non_embedding"], cfg.num_hidden_layers, d_attn) for n in lengths)

    # Warm-up: kernels, allocator, cuBLAS handles.
    read_built(model, pool[:1], 1, synth.pad_id, synth.grade_ids, device)
    rows, skipped = [], []
    for bs in args.batch_sizes:
        if time.perf_counter() > deadline:
            skipped.append(bs)
            continue
        batches = length_batches(pool, bs)
        real = [len(p.ids) for p in pool]
        padded = [len(batches[k]) * max(len(pool[i].ids) for i in batches[k]) for k in range(len(batches))]
        padded_lengths = [max(len(pool[i].ids) for i in b) for b in batches for _ in b]
        row: dict = {"batch_size": bs, "prompts": len(pool), "batches": len(batches), "tokens": sum(real),
                     "padded_tokens": sum(padded), "padding_fraction": 1.0 - sum(real) / sum(padded)}
        try:
            dev_ids = [pad_batch([pool[i] for i in b], synth.pad_id, device)[0] for b in batches]

            def bare():
                with torch.inference_mode():
                    for ids in dev_ids:
                        model.model(input_ids=ids, use_cache=False)
                sync(device)

            def readout():
                read_built(model, pool, bs, synth.pad_id, synth.grade_ids, device)
                sync(device)

            _reset_peak(device)
            readout()  # warm-up at this shape
            row["peak_memory_gib_readout"] = _peak_gib(device)
            _reset_peak(device)
            bare()
            row["peak_memory_gib_bare"] = _peak_gib(device)
            t_read, t_bare = [], []
            for _ in range(args.repeats):  # interleaved, so background load hits both alike
                t0 = time.perf_counter()
                readout()
                t_read.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                bare()
                t_bare.append(time.perf_counter() - t0)
            dev_ids.clear()
            tr, tb = statistics.median(t_read), statistics.median(t_bare)
            f_real, f_pad = flops(real), flops(padded_lengths)
            row.update({
                "seconds_readout": t_read, "seconds_bare": t_bare,
                "tokens_per_s_readout": sum(real) / tr, "tokens_per_s_bare": sum(real) / tb,
                "overhead_ratio": tr / tb,
                "model_flops": f_real,
                "flops_per_s_readout": f_real / tr, "flops_per_s_bare": f_real / tb,
                "mfu_readout": f_real / tr / peak, "mfu_bare": f_real / tb / peak,
                "mfu_padded_readout": f_pad / tr / peak, "mfu_padded_bare": f_pad / tb / peak,
                "oom": False,
            })
        except (RuntimeError, MemoryError) as exc:
            if not _is_oom(exc):
                raise
            row.update({"oom": True, "error": str(exc).splitlines()[0][:300]})
        _free(device)
        rows.append(row)
    return {"matmul": rate, "params": counts, "d_attn": d_attn, "flops_formula": FLOPS_FORMULA,
            "prompt_tokens": {"min": min(len(p.ids) for p in pool), "max": max(len(p.ids) for p in pool),
                              "mean": statistics.mean(len(p.ids) for p in pool)},
            "timing": ("median over repeats of the whole pool's reads; readout = pad_batch on the host, "
                       "copy to the device, decoder, LM head on the read rows, softmax, copy back (read_built); "
                       "bare = model.model(input_ids, use_cache=False) on the same padded batches already on "
                       "the device"),
            "repeats": args.repeats, "batch_sizes": rows, "skipped_batch_sizes": skipped}


# ---------------------------------------------------------------- part 2: bf16 against fp32


def part_precision(model, synth, pool, shape, device) -> dict:
    import torch

    low = model if next(model.parameters()).dtype == torch.bfloat16 else copy.deepcopy(model).to(torch.bfloat16)
    ref = copy.deepcopy(low).to(torch.float32)  # the same (bf16-representable) weights in fp32
    prompts = pool[: shape["precision_prompts"]]
    p_low = read_built(low, prompts, 1, synth.pad_id, synth.grade_ids, device)
    p_ref = read_built(ref, prompts, 1, synth.pad_id, synth.grade_ids, device)
    del ref
    if low is not model:
        del low
    _free(device)
    de = np.concatenate([np.abs(expected(a) - expected(b)) for a, b in zip(p_low, p_ref)])
    dp = max(float(np.abs(a - b).max()) for a, b in zip(p_low, p_ref))
    tau = [kendall_discordance(expected(a), expected(b)) for a, b in zip(p_low, p_ref)]
    return {"prompts": len(prompts), "slots": int(de.size), "batch_size": 1,
            "mean_abs_delta_eg": float(de.mean()), "max_abs_delta_eg": float(de.max()),
            "max_abs_delta_p": dp, "mean_discordance_bf16_vs_fp32": float(np.mean(tau)),
            "tf32": {"matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                     "cudnn": bool(torch.backends.cudnn.allow_tf32),
                     "float32_matmul_precision": torch.get_float32_matmul_precision()}}


# ---------------------------------------------------------------- part 3: the batch noise floor


def part_noise(model, synth, pool, shape, device, rng) -> dict:
    nb, reads_n = shape["noise_batch"], shape["noise_reads"]
    targets = list(range(min(shape["noise_targets"], len(pool))))
    per_target, deltas, taus = [], [], []
    alone_max = 0.0
    for t in targets:
        alone = expected(read_batch(model, [pool[t]], synth.pad_id, synth.grade_ids, device)[0])
        again = expected(read_batch(model, [pool[t]], synth.pad_id, synth.grade_ids, device)[0])
        a_vs_a = float(np.abs(alone - again).max())
        alone_max = max(alone_max, a_vs_a)
        others = [i for i in range(len(pool)) if i != t]
        reads, pads, positions = [], [], []
        for _ in range(reads_n):
            mates = [int(i) for i in rng.choice(others, size=min(nb - 1, len(others)), replace=False)]
            where = int(rng.integers(0, len(mates) + 1))
            batch = [pool[i] for i in mates]
            batch.insert(where, pool[t])
            probs = read_batch(model, batch, synth.pad_id, synth.grade_ids, device)[where]
            reads.append(expected(probs))
            pads.append(max(len(p.ids) for p in batch) - len(pool[t].ids))
            positions.append(where)
        r = np.stack(reads)
        d = np.abs(r - alone[None])
        deltas.append(d)
        tau = tau_psi_of_reads(r)
        taus.append(tau)
        per_target.append({"tokens": len(pool[t].ids), "alone_vs_alone_max_abs": a_vs_a,
                           "max_abs_delta_eg": float(d.max()), "mean_abs_delta_eg": float(d.mean()),
                           "tau_psi_batched_reads": tau,
                           "tau_psi_with_alone": tau_psi_of_reads(np.vstack([alone[None], r])),
                           "padding_tokens": pads, "batch_positions": positions})
    d = np.concatenate([x.ravel() for x in deltas])
    return {"batch_size": nb, "reads_per_prompt": reads_n, "prompts": len(targets),
            "alone_vs_alone_max_abs": alone_max,
            "max_abs_delta_eg": float(d.max()), "mean_abs_delta_eg": float(d.mean()),
            "tau_psi_mean": float(np.mean(taus)), "tau_psi_max": float(np.max(taus)),
            "tau_psi_definition": ("per prompt, the mean over pairs of its R batched reads of the share of "
                                   "discordant slot pairs (ties in one read count 1/2); = (1 - tau) / 2 untied"),
            "per_prompt": per_target}


# ---------------------------------------------------------------- part 4: one LoRA step


def part_lora(model, synth, shape, args, device, rng) -> dict:
    """The training step as the loop runs it, with its predicted and measured peak (gpu_training.py)."""
    if str(Path(__file__).resolve().parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_training import part_training

    return part_training(model, synth, shape, args, device, rng, sync=sync, reset_peak=_reset_peak, peak_gib=_peak_gib,
                         is_oom=_is_oom, free=_free, set_checkpointing=_set_checkpointing)


def _set_checkpointing(lm: Any, on: bool) -> None:
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


def _parse_sizes(text: str) -> list[int]:
    sizes = [int(x) for x in text.split(",") if x.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes are positive integers, got {text!r}")
    return sizes


def _fmt(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


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
        lines.append("   | batch | tokens/s readout | tokens/s bare | overhead | MFU readout | MFU bare | peak GiB |")
        for r in ro["batch_sizes"]:
            if r.get("oom"):
                lines.append(f"   | {r['batch_size']} | OOM | | | | | |")
                continue
            lines.append(f"   | {r['batch_size']} | {r['tokens_per_s_readout']:.4g} | {r['tokens_per_s_bare']:.4g} | "
                         f"{r['overhead_ratio']:.3f} | {r['mfu_readout']:.3f} | {r['mfu_bare']:.3f} | "
                         f"{_fmt(r['peak_memory_gib_readout'], '.2f')} |")
    pr = parts.get("precision", {})
    if "max_abs_delta_eg" in pr:
        lines.append(f"2. bf16 vs fp32 E[g] over {pr['slots']} slots: mean {pr['mean_abs_delta_eg']:.3g}, "
                     f"max {pr['max_abs_delta_eg']:.3g}")
    no = parts.get("noise", {})
    if "max_abs_delta_eg" in no:
        lines.append(f"3. noise floor (batch {no['batch_size']}, {no['reads_per_prompt']} reads x {no['prompts']} "
                     f"prompts): alone vs alone max {no['alone_vs_alone_max_abs']:.3g}; batched vs alone mean "
                     f"{no['mean_abs_delta_eg']:.3g}, max {no['max_abs_delta_eg']:.3g}; tau-PSI mean "
                     f"{no['tau_psi_mean']:.3g}, max {no['tau_psi_max']:.3g}")
    lo = parts.get("lora", {})
    for r in lo.get("settings", []):
        what = (f"4. LoRA step ({lo['prompts_per_step']} prompts), checkpointing "
                f"{'on' if r['gradient_checkpointing'] else 'off'}, mask {'on' if r['padding_mask'] else 'off'}, "
                f"SDPA {r['sdpa_backend_probe']}")
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
    for name, why in result["skipped"].items():
        lines.append(f"   skipped {name}: {why}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny shape (2 layers, hidden 64, ~200-token prompts)")
    ap.add_argument("--batch-sizes", type=_parse_sizes, default=None, help="comma-separated (default 1,...,32)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per batch size (default 3, tiny 1)")
    ap.add_argument("--lora-steps", type=int, default=None, help="timed LoRA steps after the warm-up one")
    ap.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                    help="the main model's dtype; auto: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--seconds-budget", type=float, default=480.0,
                    help="stop at the next part boundary (or batch size) once this much time has passed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
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
                                        "len_lo", "len_hi", "pool")},
        "model_class": type(model).__name__, "attn_implementation": model.config._attn_implementation,
        "dtype": str(dtype).replace("torch.", ""), "grade_token_ids": list(synth.grade_ids), "pad_id": synth.pad_id,
        "seconds_budget": args.seconds_budget, "seed": args.seed,
        "environment": _environment(device), "imports": imports, "model_build_s": build_s,
        "parts": {}, "elapsed_s_per_part": {}, "skipped": {},
    }

    # Part 4 adds LoRA adapters to the model itself, so it runs after every inference part.
    plan = [
        ("readout", lambda: part_readout(model, synth, pool, shape, args, device, deadline)),
        ("precision", lambda: part_precision(model, synth, pool, shape, device)),
        ("noise", lambda: part_noise(model, synth, pool, shape, device, rng)),
        ("lora", lambda: part_lora(model, synth, shape, args, device, rng)),
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
        result["parts"][name] = fn()
        result["elapsed_s_per_part"][name] = time.perf_counter() - t0
        print(f"[gpu benchmark] {name}: {result['elapsed_s_per_part'][name]:.1f} s", file=sys.stderr, flush=True)
        if name == "readout" and result["parts"][name]["skipped_batch_sizes"]:
            result["skipped"]["readout batch sizes"] = (f"{result['parts'][name]['skipped_batch_sizes']}: "
                                                        "seconds budget spent")
    result["elapsed_s"] = time.perf_counter() - t_start
    text = json.dumps(result, indent=2, default=str)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(summary(result))
    print(f"figures written to {args.out}")
    return result


if __name__ == "__main__":
    main()
