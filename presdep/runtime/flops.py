"""Model FLOPs of a causal forward: one formula for the GPU benchmark and the plan.

Standard-library only, so a bare GPU image (no polars) can import it from a checkout.
"""

from __future__ import annotations

FLOPS_FORMULA = ("per sequence of L real tokens: 2 * N_nonembed * L + 2 * n_layers * L^2 * (n_heads * head_dim); "
                 "N_nonembed = all parameters but the token embedding (tied, so the LM head too, which the readout "
                 "runs on the B read rows only and the bare forward not at all); the attention term is QK^T and AV, "
                 "4 * n_layers * L^2 * d_attn, halved for the causal mask (d_attn = n_heads * head_dim, 4096 for "
                 "Qwen3-4B where hidden is 2560); padding tokens are not counted (mfu_padded counts them)")

# A training step's FLOPs per forward FLOP: forward + backward (2x: activations and, for the
# LoRA factors only, weights; the frozen base's weight gradients are never computed, but the
# input gradients through it are) = 3; activation checkpointing runs each forward twice = 4.
TRAIN_FLOPS_PER_FORWARD = {False: 3.0, True: 4.0}


def sequence_flops(length: int, n_nonembed: int, layers: int, d_attn: int) -> float:
    """Model FLOPs of one causal forward over ``length`` tokens (see FLOPS_FORMULA)."""
    return 2.0 * n_nonembed * length + 2.0 * layers * float(length) ** 2 * d_attn


def non_embedding_params(*, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int) -> int:
    """Weights of a Qwen3/Llama-style decoder without the token embedding: per layer the q, k, v,
    o projections, the gated MLP (three matrices), two RMS norms and Qwen3's q/k norms; plus the
    final norm: 3,633,511,936 for Qwen3-4B (7.27 GFLOP per token)."""
    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    mlp = 3 * hidden * ffn
    norms = 2 * hidden + 2 * head_dim
    return layers * (attn + mlp + norms) + hidden


__all__ = ["FLOPS_FORMULA", "TRAIN_FLOPS_PER_FORWARD", "non_embedding_params", "sequence_flops"]
