"""Layer sizes of the models a config reads, for ``presdep plan``'s FLOPs.

In order: the model's fetched ``config.json`` (``resources/models/<name>/``), the shapes the
memory constants record (:func:`presdep.training.memory_model.known_shape`: the Qwen3 family),
then :data:`REFERENCE_SHAPES` below for the paper's other models. A model none of these knows
gets no FLOPs (its GPU-hours are reported unknown).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from presdep.runtime.flops import non_embedding_params, sequence_flops
from presdep.training.memory_model import ModelShape, known_shape

# hub id -> (the shape, or the hub id of a model whose recorded shape it has; where the figures come from)
REFERENCE_SHAPES: dict[str, tuple[Any, str]] = {
    "jinaai/jina-reranker-v3": ("Qwen/Qwen3-0.6B", "built on Qwen3-0.6B (its model card); Qwen3-0.6B's recorded shape"),
    "skywork/skywork-reward-v2-qwen3-4b": ("Qwen/Qwen3-4B", "Qwen3-4B with a scalar head (its model card)"),
    "castorini/rank_zephyr_7b_v1_full": (
        ModelShape(hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128, layers=32, vocab=32000,
                   tied=False, qk_norm=False),
        "Mistral-7B-v0.1's config.json (Zephyr-7B-beta's base, which RankZephyr fine-tunes)"),
    "mixedbread-ai/mxbai-rerank-base-v2": (
        ModelShape(hidden=896, intermediate=4864, heads=14, kv_heads=2, head_dim=64, layers=24, vocab=151936,
                   tied=True, qk_norm=False, attention_bias=True),
        "Qwen2.5-0.5B's config.json (the base its model card names)"),
    "mixedbread-ai/mxbai-rerank-large-v2": (
        ModelShape(hidden=1536, intermediate=8960, heads=12, kv_heads=2, head_dim=128, layers=28, vocab=151936,
                   tied=True, qk_norm=False, attention_bias=True),
        "Qwen2.5-1.5B's config.json (the base its model card names)"),
    "llm-blender/pairrm": (
        ModelShape(hidden=1024, intermediate=4096, heads=16, kv_heads=16, head_dim=64, layers=24, vocab=128100,
                   tied=True, qk_norm=False),
        "DeBERTa-v3-large's config.json (PairRM's encoder; bidirectional, so the causal formula is an estimate)"),
    "ibm-granite/granite-4.1-8b": (
        ModelShape(hidden=4096, intermediate=12800, heads=32, kv_heads=8, head_dim=128, layers=40, vocab=100352,
                   tied=True, qk_norm=False),
        ("a published GGUF build's metadata of Granite 4.1 8B (40 blocks, width 4096, FFN 12800, 32/8 heads, "
         "vocabulary 100,352), not its own config.json: fetch the model to read that")),
}


def shape_of(entry: Mapping[str, Any], name: str,
             resources: str | Path | None = "resources") -> tuple[ModelShape | None, str]:
    """(shape, where it came from) of the models entry ``name``; (None, why) when unknown.
    ``resources`` None: fetched configs are not read (the answer does not depend on this machine)."""
    local = Path(resources) / "models" / name / "config.json" if resources is not None else None
    if local is not None and local.is_file():
        return ModelShape.from_config(json.loads(local.read_text())), str(local)
    repo = str(entry.get("id") or entry.get("path") or "")
    shape = known_shape(repo) if repo else None
    if shape is not None:
        return shape, f"recorded shape of {repo}"
    ref = REFERENCE_SHAPES.get(repo.lower())
    if ref is None:
        return None, f"model {name} ({repo or entry.get('source')}): no fetched config.json and no recorded shape"
    shape, source = ref
    return (known_shape(shape) if isinstance(shape, str) else shape), source


def params(shape: ModelShape) -> int:
    """N_nonembed of the FLOPs formula (presdep.runtime.flops)."""
    return non_embedding_params(layers=shape.layers, hidden=shape.hidden, heads=shape.heads,
                                kv_heads=shape.kv_heads, head_dim=shape.head_dim, ffn=shape.intermediate)


def forward_flops(shape: ModelShape, length: float) -> float:
    """sequence_flops of one prompt of ``length`` tokens (fractional: a mean length)."""
    return sequence_flops(length, params(shape), shape.layers, shape.heads * shape.head_dim)  # type: ignore[arg-type]


# LM-head rows a readout path runs at every position: none (slot: the B read rows only), the
# four grade rows (pooling), the whole vocabulary (prompt logprobs).
HEAD_ROWS = {"slot": 0, "grade_rows": 4, "full_vocab": None}


def head_flops_per_token(shape: ModelShape, path: str) -> float:
    rows = HEAD_ROWS.get(path, 0)
    return 2.0 * shape.hidden * (shape.vocab if rows is None else rows)


def flops_per_token(shape: ModelShape, length: float, path: str = "slot") -> float:
    """Forward FLOPs per prompt token at a prompt length, with the path's head."""
    return forward_flops(shape, length) / max(length, 1.0) + head_flops_per_token(shape, path)


def decode_flops(shape: ModelShape, context: float, new_tokens: int) -> float:
    """Greedy generation of ``new_tokens`` after a ``context``-token prompt: the formula's growth
    over those tokens, plus the full-vocabulary head for each."""
    return (forward_flops(shape, context + new_tokens) - forward_flops(shape, context)
            + new_tokens * head_flops_per_token(shape, "full_vocab"))


__all__ = ["REFERENCE_SHAPES", "decode_flops", "flops_per_token", "forward_flops", "head_flops_per_token",
           "params", "shape_of"]
