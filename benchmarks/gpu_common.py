"""What the parts of benchmarks/gpu.py share: the random Qwen3 model, synthetic prompts in the
skeleton builder's layout, presdep's readout loop (as ``TransformersScorer.read_built`` runs it),
the matmul rate and the device's memory helpers.

Only polars-free presdep modules are imported (a stock GPU image has no polars).
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Sequence

import numpy as np
import torch

# ---------------------------------------------------------------- the device


def sync(device: Any) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: Any) -> None:
    """Reset the allocated and the reserved peak together. The allocator's cache is emptied first:
    otherwise the reserved peak starts at whatever an earlier setting left cached."""
    if torch.device(device).type == "cuda":
        free(device)
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: Any) -> float | None:
    """``torch.cuda.max_memory_allocated()`` since the last reset, GiB (None off CUDA)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return None


def peak_reserved_gib(device: Any) -> float | None:
    """``torch.cuda.max_memory_reserved()`` since the last reset, GiB (None off CUDA): the allocated
    peak plus the caching allocator's slack and fragmentation, what must fit in the device."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_reserved() / 2**30
    return None


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def free(device: Any) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


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


def read_batch(model: Any, prompts: Sequence[Any], pad_id: int, grade_ids: Sequence[int], device: Any) -> list:
    """One right-padded batch in the given order: P(grade) per slot, float64 [n_slots, 4] per prompt."""
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
