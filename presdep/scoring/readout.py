"""The one-pass expected-grade readout on a causal LM.

One forward pass over prompt + skeleton; only the hidden states at the read
positions go through the LM head, and only the four grade logits are kept:
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
    """Logits of the four grade tokens at each read position: [batch, slots, 4].

    Runs the decoder to hidden states, gathers the read positions, and applies
    the LM head to those rows only (never materialises [batch, length, vocab]).
    With right padding ``attention_mask`` may be None: the causal mask alone is
    exact for real tokens, and an explicit mask costs ~35% on CPU (SDPA leaves
    its causal fast path).
    """
    decoder, head = _decoder_and_head(model)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    rows = torch.arange(hidden.shape[0], device=hidden.device).unsqueeze(1)
    picked = hidden[rows, read_positions]  # [batch, slots, hidden]
    logits = head(picked)[..., list(grade_ids)]
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap  # as the model's own forward does
    return logits


def grade_probs(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over the four grade logits, in float64 for exact sums."""
    return torch.softmax(logits.to(torch.float64), dim=-1)


def expected_grade(probs: torch.Tensor) -> torch.Tensor:
    return probs @ GRADE_VALUES.to(probs.device)
