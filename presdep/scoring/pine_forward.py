"""A hand-written forward of a Qwen2/Qwen3 causal LM with per-query key sets and RoPE positions.

It runs the model's own modules and weights (embedding, per layer the input norm, the
q/k/v projections with Qwen3's per-head q/k norms, RoPE from the model's rotary embedding,
the output projection, the MLP, the final norm, the LM head) in plain torch, batch size 1,
and returns the four grade logits at the read positions of a
:class:`~presdep.scoring.pine_prompt.SegmentedPrompt`. Three layouts:

``causal``
    Ordinary causal attention at positions 0..L-1: the model's own forward, which the tests
    compare it with.

``isolated`` (the provably invariant control)
    Positions: the prefix 0..P-1; every document right-aligned to a common end
    E = P + total document tokens; the suffix from E on; every skeleton line at the same
    positions right after the suffix. Attention: the prefix is causal; a document sees the
    prefix and itself (causally); the suffix sees the prefix and itself, not the documents;
    slot i's line sees the prefix, document i, the suffix and itself only, so no line sees
    another. For a document's expected grade to be exactly independent of its slot, no token
    it or its line sees may depend on the slot: the prompt is built by
    :func:`~presdep.scoring.pine_prompt.isolated_prompt`, which shows every document under
    the label ``[1]`` (each ending in ``\\n``) and makes every line read ``[1] Grade: 0``.
    What a line sees then differs between orders only in the summation order of its
    attention, so E[g] agrees across orders to rounding.

``pine`` (Wang et al., ICLR 2025)
    The documents keep their ordinary ``[i]`` labels and lines (:func:`~presdep.scoring.
    pine_prompt.segment_prompt`); positions as above, with the suffix and the skeleton
    lines one causal stream (the tail) from E on. The prefix is causal. A document token
    sees the prefix, its own document causally and every other document (not the tail);
    the other documents are placed, per query document and per head, in order of
    importance: the most important just before the own document's positions, each shifted
    down by the total length of those placed before it. A tail token sees the prefix, every
    document and the tail before it, the documents ordered by its own importance with the
    most important adjacent to E. One document: no shift. Two documents: each simply
    adjacent to the other (no importance computed).

Choices taken from the public reference port (thomsonreuters/presentation-dependence,
``rerankers/pine.py``, itself from the authors' code) where the method text is silent:

- importance is recomputed in every layer from that layer's pre-RoPE queries and keys
  (after Qwen3's q/k norms), per query head against the keys of its KV group, scaled by
  the attention scale;
- a document's importance: softmax over the keys of the document region only (the prefix
  is not in the normaliser) with the own-document block masked out, averaged over each
  target document's tokens and summed over the query document's tokens;
- a tail token's importance: the same softmax over the document region with nothing
  masked, averaged over each target document's tokens, one order per tail token and head
  (the tail's order is computed even for two documents);
- ties keep prompt order: of two equally important documents the earlier is placed nearer.

Choices of this module: the importance sums run in float32 whatever the model's dtype;
a key placed at a shifted position ``p - s`` is realised by rotating the query to
``q + s`` instead (RoPE scores depend on the difference only), which equals the
reference's key rotation up to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from presdep.contracts.errors import InvalidInput
from presdep.scoring.pine_prompt import SegmentedPrompt
from presdep.scoring.readout import grade_head_logits

MODES = ("causal", "isolated", "pine")
SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3")


@dataclass(frozen=True)
class Layout:
    """Where every token sits and what it may see, for one prompt.

    Tokens come in blocks (the prefix, each document, the suffix or tail, each line); a query
    sees its own block causally (by sequence index) and every block ``sees[its block]``
    marks in full. ``spans`` are the documents' sequence ranges when their order is
    recomputed per query (``pine``), else empty.
    """

    ids: torch.Tensor  # [L] token ids
    positions: torch.Tensor  # [L] RoPE positions
    block: torch.Tensor  # [L] block of each token
    sees: torch.Tensor  # [blocks, blocks] bool: a query block sees all of a key block
    reads: torch.Tensor  # [slots] sequence indices of the read positions
    spans: tuple[tuple[int, int], ...] = ()


def check_architecture(config: Any, name: str) -> None:
    """Refuse a model the hand-written forward does not implement."""
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_MODEL_TYPES:
        raise InvalidInput(f"model {name!r} has config.model_type {kind!r}; the PINE forward is written for "
                           f"{list(SUPPORTED_MODEL_TYPES)} decoders only")
    windowed = sorted({t for t in (getattr(config, "layer_types", None) or []) if t != "full_attention"})
    if windowed:
        raise InvalidInput(f"model {name!r} has {windowed} layers; the PINE forward implements full attention only")


def _blocks(segments: Sequence[tuple[Sequence[int], Sequence[int]]]) -> tuple[torch.Tensor, ...]:
    """(ids, positions, block) of segments given as (ids, positions), block = segment index."""
    ids = [t for seg, _ in segments for t in seg]
    pos = [p for _, ps in segments for p in ps]
    block = [b for b, (seg, _) in enumerate(segments) for _ in seg]
    return (torch.tensor(ids, dtype=torch.long), torch.tensor(pos, dtype=torch.long),
            torch.tensor(block, dtype=torch.long))


def build_layout(prompt: SegmentedPrompt, mode: str) -> Layout:
    """The layout of ``prompt`` under ``mode`` (see the module docstring)."""
    if mode not in MODES:
        raise InvalidInput(f"unknown PINE forward mode {mode!r}; expected one of {list(MODES)}")
    reads = torch.tensor(prompt.read_positions(), dtype=torch.long)
    if mode == "causal":
        ids = torch.tensor(prompt.ids(), dtype=torch.long)
        n = ids.numel()
        one_block = torch.zeros(n, dtype=torch.long)
        return Layout(ids, torch.arange(n), one_block, torch.zeros(1, 1, dtype=torch.bool), reads)
    n_docs, p = len(prompt.documents), len(prompt.prefix)
    end = p + sum(len(d) for d in prompt.documents)  # E: where every document ends
    segments = [(prompt.prefix, range(p))] + [(d, range(end - len(d), end)) for d in prompt.documents]
    spans, at = [], p
    for d in prompt.documents:
        spans.append((at, at + len(d)))
        at += len(d)
    docs = list(range(1, n_docs + 1))
    if mode == "pine":
        tail = list(prompt.suffix) + [t for line in prompt.lines for t in line]
        segments.append((tail, range(end, end + len(tail))))
        sees = torch.zeros(n_docs + 2, n_docs + 2, dtype=torch.bool)
        sees[docs, 0] = True
        sees[1:n_docs + 1, 1:n_docs + 1] = ~torch.eye(n_docs, dtype=torch.bool)
        sees[n_docs + 1, : n_docs + 1] = True
        return Layout(*_blocks(segments), sees, reads, tuple(spans))
    suffix_end = end + len(prompt.suffix)
    segments.append((prompt.suffix, range(end, suffix_end)))
    segments += [(line, range(suffix_end, suffix_end + len(line))) for line in prompt.lines]
    sees = torch.zeros(2 * n_docs + 2, 2 * n_docs + 2, dtype=torch.bool)
    sees[docs, 0] = True
    sees[n_docs + 1, 0] = True
    for i in docs:
        line = n_docs + 1 + i
        sees[line, [0, i, n_docs + 1]] = True
    return Layout(*_blocks(segments), sees, reads)


def allowed_keys(layout: Layout) -> torch.Tensor:
    """[L, L] bool: which keys each query may attend to."""
    b = layout.block
    n = b.numel()
    causal = torch.ones(n, n, dtype=torch.bool, device=b.device).tril()
    return ((b[:, None] == b[None, :]) & causal) | layout.sees[b[:, None], b[None, :]]


# --- document order (pine) ----------------------------------------------------------------

def _placement_shifts(order: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per target document, the total length of the documents placed nearer than it.

    ``order[..., j]`` is the document placed j-th nearest; the result is indexed by document.
    """
    placed = lengths[order]
    before = torch.cumsum(placed, dim=-1) - placed
    return torch.empty_like(before).scatter_(-1, order, before)


def document_shifts(importance: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[..., n, n] position shifts: entry (q, t) moves document t down by that much for the
    tokens of document q. The own document stays (0); the others are ranked by importance
    (descending, ties in prompt order), the most important moved by the own document's
    length so that it ends where the own document starts."""
    n = lengths.numel()
    own = torch.eye(n, dtype=torch.bool, device=importance.device)
    ranked = importance.masked_fill(own, float("inf"))  # the own document is "placed" first
    order = torch.argsort(ranked, dim=-1, descending=True, stable=True)
    return _placement_shifts(order, lengths)


def tail_shifts(importance: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[..., T, n] shifts for tail tokens: the most important document stays adjacent to E (0),
    each next one moved by the total length of those ranked before it."""
    order = torch.argsort(importance, dim=-1, descending=True, stable=True)
    return _placement_shifts(order, lengths)


def _membership(lengths: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    owner = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
    return owner, torch.nn.functional.one_hot(owner, lengths.numel()).to(dtype)


def document_importance(q: torch.Tensor, k: torch.Tensor, lengths: torch.Tensor, scale: float) -> torch.Tensor:
    """[H, n, n] importance of document t for document q, from pre-RoPE queries and keys of the
    document region ([H, Ld, D] each): softmax over the region with the own block masked,
    averaged over t's tokens, summed over q's tokens."""
    owner, member = _membership(lengths)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(owner[:, None] == owner[None, :], torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    per_target = (weights @ member) / lengths.to(torch.float32)  # [H, Ld, n]
    return member.T @ per_target


def tail_importance(q: torch.Tensor, k: torch.Tensor, lengths: torch.Tensor, scale: float) -> torch.Tensor:
    """[H, T, n] importance of each document for each tail token (queries [H, T, D], document
    keys [H, Ld, D]): softmax over the region, averaged over the document's tokens."""
    _, member = _membership(lengths)
    weights = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1, dtype=torch.float32)
    return (weights @ member) / lengths.to(torch.float32)


def query_shifts(layout: Layout, q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor | None:
    """[H, L, n] long: how far each query token (per head) moves each document down; None when
    nothing moves (no reordering, or one document)."""
    spans = layout.spans
    if len(spans) < 2:
        return None
    start, end = spans[0][0], spans[-1][1]
    lengths = torch.tensor([e - s for s, e in spans], dtype=torch.long, device=q.device)
    heads, n = q.shape[0], len(spans)
    if n > 2:
        imp = document_importance(q[:, start:end], k[:, start:end], lengths, scale)
    else:  # two documents: each adjacent to the other whatever the importance
        imp = torch.zeros(heads, n, n, device=q.device)
    owner, _ = _membership(lengths)
    shifts = torch.zeros(heads, q.shape[1], n, dtype=torch.long, device=q.device)
    shifts[:, start:end] = document_shifts(imp, lengths)[:, owner]
    if q.shape[1] > end:
        shifts[:, end:] = tail_shifts(tail_importance(q[:, end:], k[:, start:end], lengths, scale), lengths)
    return shifts


# --- the forward --------------------------------------------------------------------------

def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


def _cos_sin(rotary: Any, like: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's RoPE tables at ``positions`` of any shape: [*shape, head_dim] each."""
    cos, sin = rotary(like, positions.reshape(1, -1))
    return cos.reshape(*positions.shape, -1), sin.reshape(*positions.shape, -1)


def _attention(attn: Any, h: torch.Tensor, layout: Layout, allowed: torch.Tensor, rotary: Any,
               cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    n, hd = h.shape[0], attn.head_dim
    q = attn.q_proj(h).view(n, -1, hd)
    k = attn.k_proj(h).view(n, -1, hd)
    v = attn.v_proj(h).view(n, -1, hd)
    if hasattr(attn, "q_norm"):  # Qwen3: per-head RMSNorm before RoPE
        q, k = attn.q_norm(q), attn.k_norm(k)
    groups = attn.num_key_value_groups  # query head j reads KV head j // groups
    q = q.transpose(0, 1)
    k = k.transpose(0, 1).repeat_interleave(groups, dim=0)
    v = v.transpose(0, 1).repeat_interleave(groups, dim=0)
    k_rot = _rope(k, cos, sin)
    scores = (_rope(q, cos, sin) @ k_rot.transpose(-1, -2)) * attn.scaling
    shifts = query_shifts(layout, q, k, attn.scaling)
    if shifts is not None:
        rows = slice(layout.spans[0][0], n)  # the prefix never sees a document
        for t, (s, e) in enumerate(layout.spans):
            at = layout.positions[rows][None, :] + shifts[:, rows, t]  # [H, R]
            c, sn = _cos_sin(rotary, h, at)
            scores[:, rows, s:e] = (_rope(q[:, rows], c, sn) @ k_rot[:, s:e].transpose(-1, -2)) * attn.scaling
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return attn.o_proj((probs @ v).transpose(0, 1).reshape(n, -1))


def grade_logits(model: Any, layout: Layout, grade_ids: Sequence[int]) -> torch.Tensor:
    """The four grade logits at each read position of ``layout``: [slots, 4]."""
    check_architecture(model.config, getattr(model.config, "name_or_path", None) or type(model).__name__)
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    device = next(model.parameters()).device
    layout = replace(layout, ids=layout.ids.to(device), positions=layout.positions.to(device),
                     block=layout.block.to(device), sees=layout.sees.to(device), reads=layout.reads.to(device))
    allowed = allowed_keys(layout)
    x = decoder.embed_tokens(layout.ids)
    cos, sin = _cos_sin(decoder.rotary_emb, x, layout.positions)
    for layer in decoder.layers[: model.config.num_hidden_layers]:
        x = x + _attention(layer.self_attn, layer.input_layernorm(x), layout, allowed, decoder.rotary_emb, cos, sin)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return grade_head_logits(model, head, decoder.norm(x[layout.reads]), grade_ids)


__all__ = ["MODES", "SUPPORTED_MODEL_TYPES", "Layout", "allowed_keys", "build_layout", "check_architecture",
           "document_importance", "document_shifts", "grade_logits", "query_shifts", "tail_importance",
           "tail_shifts"]
