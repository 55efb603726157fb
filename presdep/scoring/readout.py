"""The one-pass expected-grade readout on a causal LM.

One forward pass over prompt + skeleton; only the hidden states at the read
positions meet the LM head, and only its four grade rows, in float32:
P(g) = softmax over grades, E[g] = sum g P(g). Because later slots see earlier
dummy lines under causal attention, this equals reading each prefix separately.

:func:`slot_grade_logits` is differentiable (training uses it); the scorer wraps
it in ``torch.inference_mode``.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from presdep.scoring.template import PromptIds

GRADE_VALUES = torch.arange(4, dtype=torch.float64)


def pad_batch(
    prompts: Sequence[PromptIds], pad_id: int, device: Any = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad a batch: (input_ids, attention_mask, read_positions, slot_mask).

    Right padding keeps every real token at its unpadded position (position ids
    0..len-1), and causal attention never lets a real token see a pad, so the
    readout may run without the mask (only pad rows, never read, differ).
    """
    length = max(len(p.ids) for p in prompts)
    slots = max(len(p.read_positions) for p in prompts)
    ids = torch.full((len(prompts), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), length), dtype=torch.long)
    reads = torch.zeros((len(prompts), slots), dtype=torch.long)
    slot_mask = torch.zeros((len(prompts), slots), dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, : len(p.ids)] = torch.tensor(p.ids, dtype=torch.long)
        mask[i, : len(p.ids)] = 1
        reads[i, : len(p.read_positions)] = torch.tensor(p.read_positions, dtype=torch.long)
        slot_mask[i, : len(p.read_positions)] = True
    return ids.to(device), mask.to(device), reads.to(device), slot_mask.to(device)


def _decoder_and_head(model: Any) -> tuple[Any, Any]:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if decoder is None or head is None:
        raise TypeError(f"{type(model).__name__} exposes no decoder/LM head; expected a *ForCausalLM model")
    return decoder, head


def slot_grade_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    read_positions: torch.Tensor,
    grade_ids: Sequence[int],
) -> torch.Tensor:
    """Float32 (at least) logits of the grade tokens at each read position: [batch, slots, len(grade_ids)].

    Runs the decoder to hidden states, gathers the read positions, and multiplies those
    rows by the grade tokens' rows of the LM head (:func:`grade_head_logits`; never the
    full vocabulary). With right padding ``attention_mask`` may be None: the causal mask
    alone is exact for real tokens, and an explicit mask costs ~35% on CPU (SDPA leaves
    its causal fast path).
    """
    decoder, head = _decoder_and_head(model)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    rows = torch.arange(hidden.shape[0], device=hidden.device).unsqueeze(1)
    picked = hidden[rows, read_positions]  # [batch, slots, hidden]
    return grade_head_logits(model, head, picked, grade_ids)


def grade_head_logits(model: Any, head: Any, hidden: torch.Tensor, grade_ids: Sequence[int]) -> torch.Tensor:
    """The LM head's logits of ``grade_ids`` for hidden rows ``[..., hidden]``, in float32 (float64 rows
    stay float64).

    In the model's dtype a bf16 logit of magnitude 16 or more moves in steps of 0.125, which
    quantises E[g] and ties slots, the very quantity presdep measures; vLLM's pooling head
    computes the same rows in float32. So the hidden rows (each already rounded once by the
    model) and the grade rows of the head are cast up and multiplied in float32, with the
    model's own post-head transforms (Granite's ``logits_scaling``, Gemma 2's soft cap).
    Differentiable: training reads through it.
    """
    # float32 at least: a float64 model (the gradient equality tests) keeps float64.
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    ids = torch.as_tensor(list(grade_ids), dtype=torch.long, device=head.weight.device)
    weight = head.weight.index_select(0, ids).to(dtype)
    # Under a training step's bf16 autocast the matmul would run in bf16 again.
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        logits = hidden.to(dtype) @ weight.to(hidden.device).T
    bias = getattr(head, "bias", None)
    if bias is not None:
        logits = logits + bias.index_select(0, ids).to(dtype).to(hidden.device)
    config = getattr(model, "config", None)
    scaling = getattr(config, "logits_scaling", None)
    if scaling and scaling != 1:
        logits = logits / scaling  # GraniteForCausalLM divides its logits by it
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap  # as the model's own forward does
    return logits


def grade_probs(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over the four grade logits, in float64 for exact sums."""
    return torch.softmax(logits.to(torch.float64), dim=-1)


def expected_grade(probs: torch.Tensor) -> torch.Tensor:
    return probs @ GRADE_VALUES.to(probs.device)
