"""The ``precision`` and ``noise`` parts of benchmarks/gpu.py: bf16 against fp32, and the batch
noise floor.

The model has random weights, so these are kernel-level figures: how far bf16 kernels, padding,
batch companions and batch positions move E[g] and the slot order of one random model. A trained
Qwen3-4B's deltas and flips follow its own grade distribution and the margins between its slots'
E[g], which a random model's are not.
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np
import torch
from gpu_common import expected, free, read_batch, read_built

WEIGHTS = "random"
MEANING = ("kernel-level: the model has random weights, so these figures are what bf16 kernels, padding, batch "
           "companions and batch positions do to the arithmetic of one random Qwen3 of this shape, not a trained "
           "Qwen3-4B's score distribution (its grade margins, hence its flips, differ)")


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


def part_precision(model, synth, pool, shape, device) -> dict:
    low = model if next(model.parameters()).dtype == torch.bfloat16 else copy.deepcopy(model).to(torch.bfloat16)
    ref = copy.deepcopy(low).to(torch.float32)  # the same (bf16-representable) weights in fp32
    prompts = pool[: shape["precision_prompts"]]
    p_low = read_built(low, prompts, 1, synth.pad_id, synth.grade_ids, device)
    p_ref = read_built(ref, prompts, 1, synth.pad_id, synth.grade_ids, device)
    del ref
    if low is not model:
        del low
    free(device)
    de = np.concatenate([np.abs(expected(a) - expected(b)) for a, b in zip(p_low, p_ref)])
    dp = max(float(np.abs(a - b).max()) for a, b in zip(p_low, p_ref))
    tau = [kendall_discordance(expected(a), expected(b)) for a, b in zip(p_low, p_ref)]
    return {"weights": WEIGHTS, "meaning": MEANING,
            "prompts": len(prompts), "slots": int(de.size), "batch_size": 1,
            "mean_abs_delta_eg": float(de.mean()), "max_abs_delta_eg": float(de.max()),
            "max_abs_delta_p": dp, "mean_discordance_bf16_vs_fp32": float(np.mean(tau)),
            "tf32": {"matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                     "cudnn": bool(torch.backends.cudnn.allow_tf32),
                     "float32_matmul_precision": torch.get_float32_matmul_precision()}}


def part_noise(model, synth, pool, shape, device, rng) -> dict:
    """Each target read alone twice, then ``noise_reads`` times inside a batch of ``noise_batch``
    with random companions at a random position (so with other padding)."""
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
    return {"weights": WEIGHTS, "meaning": MEANING,
            "batch_size": nb, "reads_per_prompt": reads_n, "prompts": len(targets),
            "alone_vs_alone_max_abs": alone_max,
            "max_abs_delta_eg": float(d.max()), "mean_abs_delta_eg": float(d.mean()),
            "tau_psi_mean": float(np.mean(taus)), "tau_psi_max": float(np.max(taus)),
            "tau_psi_definition": ("per prompt, the mean over pairs of its R batched reads of the share of "
                                   "discordant slot pairs (ties in one read count 1/2); = (1 - tau) / 2 untied"),
            "per_prompt": per_target}
