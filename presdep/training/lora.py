"""LoRA adapters via peft: build, freeze the base, save and load adapter weights.

Also a tiny random causal LM (a 2-layer Llama config) over a real tokenizer, used by
the tests and by the benchmark when the real model is not fetched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from presdep.contracts.errors import InvalidInput

LORA_KEYS = ("r", "alpha", "dropout", "target_modules")  # defaults: the config schema's student.lora


def lora_settings(spec: Mapping[str, Any] | None) -> dict:
    out = dict(spec or {})
    missing = [k for k in LORA_KEYS if k not in out]
    unknown = sorted(set(out) - set(LORA_KEYS))
    if missing or unknown:
        raise InvalidInput(f"LoRA settings: missing {missing}, unknown {unknown}; expected exactly {list(LORA_KEYS)}")
    if int(out["r"]) < 1 or not 0.0 <= float(out["dropout"]) < 1.0:
        raise InvalidInput(f"LoRA needs r >= 1 and 0 <= dropout < 1: {out}")
    out["target_modules"] = list(out["target_modules"])
    return out


def add_lora(model: Any, spec: Mapping[str, Any] | None, seed: int) -> Any:
    """Wrap ``model`` with fresh LoRA adapters (initialised under ``seed``); base frozen."""
    from peft import LoraConfig, get_peft_model

    s = lora_settings(spec)
    cfg = LoraConfig(
        r=int(s["r"]),
        lora_alpha=float(s["alpha"]),
        lora_dropout=float(s["dropout"]),
        target_modules=s["target_modules"],
        bias="none",
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(int(seed))
    peft_model = get_peft_model(model, cfg)
    bad = [n for n, p in peft_model.named_parameters() if p.requires_grad and "lora_" not in n]
    if bad:
        raise RuntimeError(f"parameters outside the adapter would train: {bad[:5]}")
    return peft_model


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's weights (cloned, on CPU)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter_state(model: Any, state: Mapping[str, torch.Tensor]) -> None:
    from peft import set_peft_model_state_dict

    res = set_peft_model_state_dict(model, dict(state))
    unexpected = getattr(res, "unexpected_keys", [])
    if unexpected:
        raise RuntimeError(f"adapter checkpoint has keys the model lacks: {unexpected[:5]}")


def save_adapter(model: Any, out_dir: str | Path) -> None:
    """peft's own adapter folder (adapter_config.json + adapter_model.safetensors)."""
    model.save_pretrained(str(out_dir), safe_serialization=True)


def load_adapter(base_model: Any, adapter_dir: str | Path, *, trainable: bool = False) -> Any:
    from peft import PeftModel

    return PeftModel.from_pretrained(base_model, str(adapter_dir), is_trainable=trainable)


def tiny_causal_lm(tokenizer: Any, seed: int = 0, *, layers: int = 2, hidden: int = 64) -> Any:
    """A tiny random Llama over ``tokenizer``'s vocabulary (tests and benchmarks)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(int(seed))
    return LlamaForCausalLM(cfg).eval()


__all__ = [
    "LORA_KEYS", "lora_settings", "add_lora", "adapter_state", "load_adapter_state",
    "save_adapter", "load_adapter", "tiny_causal_lm",
]
