"""The ``grade_logits`` part of benchmarks/gpu.py: the grade logits through the full LM head in
bfloat16 against the four grade rows in float32, from the same hidden rows.

- ``bf16_head`` (the former readout): ``head(picked)[..., grade_ids]``, the [slots, vocab] product
  in bfloat16, so each logit is rounded to bfloat16 (8 significant bits) before the softmax;
- ``fp32_rows``: ``picked.float() @ head.weight[grade_ids].float().T``, the same inputs multiplied in
  float32.

Both start from the same bfloat16 hidden rows and head weights (the model's own in a bf16 run; a
float32 CPU run rounds them first, so only the head's output rounding differs). Figures: the largest
logit difference, the largest E[g] difference, and per prompt the share of its B slots whose E[g]
equals another slot's (ties, which a ranking cannot order). With random weights the grade logits are
of order 1, where bfloat16 steps are 1/128; a trained model's are larger (steps of 1/8 from 16 up),
so ``shifted_logits`` also rounds the float32 logits shifted by a constant (softmax does not change)
as a bf16 head's output would be at that magnitude.

Self-contained on purpose: it pads and picks the read rows itself, so it measures the two formulas,
whatever presdep's readout module does today.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from gpu_common import expected, free
from gpu_noise import MEANING, WEIGHTS, kendall_discordance

SHIFTS = (16.0, 32.0)  # a trained model's grade logits sit around here (bf16 steps of 1/8 and 1/4)


def _right_pad(prompts: Sequence[Any], pad_id: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """[batch, longest] ids right-padded with ``pad_id`` and [batch, slots] read positions."""
    width = max(len(p.ids) for p in prompts)
    slots = max(len(p.read_positions) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    reads = torch.zeros((len(prompts), slots), dtype=torch.long)
    for k, p in enumerate(prompts):
        ids[k, : len(p.ids)] = torch.as_tensor(p.ids)
        reads[k, : len(p.read_positions)] = torch.as_tensor(p.read_positions)
    return ids.to(device), reads.to(device)


def _softmax_eg(logits: np.ndarray) -> np.ndarray:
    """E[g] per slot from float64 grade logits [slots, 4]."""
    x = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(x)
    return expected(p / p.sum(axis=-1, keepdims=True))


def tied_fraction(eg: np.ndarray) -> float:
    """Share of the slots whose E[g] equals (exactly) that of another slot of the same prompt."""
    _, inverse, counts = np.unique(np.asarray(eg, dtype=np.float64), return_inverse=True, return_counts=True)
    return float(np.mean(counts[inverse] > 1))


def compare(old: Sequence[np.ndarray], new: Sequence[np.ndarray]) -> dict:
    """Figures of two paths' per-prompt grade logits (float64 [slots, 4] each)."""
    eg_old = [_softmax_eg(a) for a in old]
    eg_new = [_softmax_eg(b) for b in new]
    d_logit = np.concatenate([np.abs(a - b).ravel() for a, b in zip(old, new)])
    d_eg = np.concatenate([np.abs(a - b) for a, b in zip(eg_old, eg_new)])
    ties_old = [tied_fraction(e) for e in eg_old]
    ties_new = [tied_fraction(e) for e in eg_new]
    return {"max_abs_logit_diff": float(d_logit.max()), "mean_abs_logit_diff": float(d_logit.mean()),
            "max_abs_eg_diff": float(d_eg.max()), "mean_abs_eg_diff": float(d_eg.mean()),
            "tied_fraction_bf16_head": float(np.mean(ties_old)), "tied_fraction_bf16_head_max": float(np.max(ties_old)),
            "tied_fraction_fp32_rows": float(np.mean(ties_new)), "tied_fraction_fp32_rows_max": float(np.max(ties_new)),
            "mean_discordance": float(np.mean([kendall_discordance(a, b) for a, b in zip(eg_old, eg_new)]))}


def part_grade_logits(model: Any, synth: Any, pool: Sequence[Any], shape: dict, device: Any) -> dict:
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    gid = list(synth.grade_ids)
    w16 = head.weight.detach().to(torch.bfloat16)  # no copy when the model is bf16
    w32 = w16[gid].float()  # [4, hidden]
    prompts = list(pool[: shape["logits_prompts"]])
    bs = shape["logits_batch"]
    old, new = [], []
    with torch.inference_mode():
        for s in range(0, len(prompts), bs):
            batch = prompts[s : s + bs]
            ids, reads = _right_pad(batch, synth.pad_id, device)
            hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state  # right padding: causal is exact
            rows = torch.arange(hidden.shape[0], device=hidden.device).unsqueeze(1)
            picked = hidden[rows, reads].to(torch.bfloat16)  # [batch, slots, hidden]
            full = torch.nn.functional.linear(picked, w16)  # [batch, slots, vocab], bf16 out
            a = full[..., gid].double().cpu().numpy()
            b = (picked.float() @ w32.T).double().cpu().numpy()
            for k, p in enumerate(batch):
                n = len(p.read_positions)
                old.append(a[k, :n])
                new.append(b[k, :n])
            del hidden, full
    free(device)
    out = {"weights": WEIGHTS, "meaning": MEANING, "prompts": len(prompts), "batch_size": bs,
           "slots": int(sum(len(x) for x in new)),
           "model_dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
           "paths": {"bf16_head": "head(picked)[..., grade_ids]: the full-vocabulary product in bfloat16",
                     "fp32_rows": "picked.float() @ head.weight[grade_ids].float().T"},
           "ties": "per prompt, the share of its slots whose E[g] equals another slot's; mean (and max) over prompts",
           "max_abs_logit": float(max(np.abs(x).max() for x in new))}
    out.update(compare(old, new))
    # bf16 rounds relative to magnitude: the float32 logits at a trained model's level, rounded as a
    # bf16 head's output would be (the input rounding is already in both).
    out["shifted_logits_note"] = ("the float32 logits plus a constant, rounded to bfloat16 and the constant taken "
                                  "off: a bf16 head's output rounding at a trained model's logit magnitude, over "
                                  "this random model's (small) spreads between grades and slots")
    out["shifted_logits"] = {}
    for shift in SHIFTS:
        rounded = [(torch.from_numpy(x + shift).to(torch.bfloat16).double().numpy() - shift) for x in new]
        row = compare(rounded, new)
        out["shifted_logits"][f"{shift:g}"] = {k: row[k] for k in ("max_abs_logit_diff", "max_abs_eg_diff",
                                                                  "tied_fraction_bf16_head", "tied_fraction_fp32_rows",
                                                                  "mean_discordance")}
    return out
