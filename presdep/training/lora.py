"""LoRA adapters via peft: build, freeze the base, save and load adapter weights.

Also a tiny random causal LM (a 2-layer Llama config) over a real tokenizer, used by
the tests and by the benchmark when the real model is not fetched.
"""

from __future__ import annotations

import inspect
import json
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


def enable_checkpointing(model: Any, every_n_layers: int = 1) -> None:
    """Activation checkpointing of every n-th decoder layer (layers 0, n, 2n, ...), through
    transformers' ``activation_checkpointing_enable`` where it has it, else its older name for
    the same call (``gradient_checkpointing_enable(every_n_layers=...)``, transformers 5.19)."""
    kwargs = {"use_reentrant": False}
    n = int(every_n_layers)
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs, every_n_layers=n)
    elif "every_n_layers" in inspect.signature(model.gradient_checkpointing_enable).parameters:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs, every_n_layers=n)
    elif n == 1:  # transformers that checkpoint all layers or none
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise InvalidInput(f"checkpoint_every_layers: {every_n_layers} needs transformers' "
                           "activation_checkpointing_enable(every_n_layers=...); this version checkpoints all or none")


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
    """peft's own adapter folder (adapter_config.json + adapter_model.safetensors), byte-stable.

    Identical weights give identical bytes: the adapter's hash is its identity in the read
    cache, so a retrained student whose weights did not change re-reads nothing. See
    :func:`canonicalise_adapter_dir` for what peft would otherwise vary.
    """
    model.save_pretrained(str(out_dir), safe_serialization=True)
    canonicalise_adapter_dir(out_dir, set_fields=_set_valued_fields(model))


# Config fields whose order carries no meaning (peft turns them into sets), sorted on every save
# even when the live config no longer says which fields were sets.
_UNORDERED_FIELDS = ("target_modules", "exclude_modules")


def _set_valued_fields(model: Any) -> set[str]:
    """The names of the live peft config fields that hold a set (saved as a list in hash order)."""
    out: set[str] = set()
    for cfg in (getattr(model, "peft_config", None) or {}).values():
        for k, v in vars(cfg).items():
            if isinstance(v, (set, frozenset)):
                out.add(k)
    return out


def _canonical_config(cfg: dict, set_fields: set[str]) -> dict:
    out = dict(cfg)
    for k in set(set_fields) | set(_UNORDERED_FIELDS):
        v = out.get(k)
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            out[k] = sorted(set(v))
    # A base model loaded from a local folder names that folder: a machine-local path that would make
    # the same adapter hash differently per checkout. Hub ids stay; peft loads the adapter without it.
    base = out.get("base_model_name_or_path")
    if isinstance(base, str) and base and (Path(base).is_absolute() or Path(base).exists()
                                           or base.startswith((".", "~"))):
        out["base_model_name_or_path"] = None
    return out


def _canonical_safetensors(data: bytes, where: Path) -> bytes:
    """The same file with its JSON header in one order: ``__metadata__`` first, keys sorted (the
    safetensors writer keeps them in a Rust HashMap, a different order each process), then the
    tensors by their offset; padded with spaces to 8 bytes as the writer does. Tensor bytes untouched."""
    import struct

    if len(data) < 8:
        raise RuntimeError(f"{where}: truncated safetensors file ({len(data)} bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise RuntimeError(f"{where}: safetensors header of {n} bytes runs past the file's end")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    ordered: dict[str, Any] = {}
    if meta is not None:
        ordered["__metadata__"] = dict(sorted(meta.items()))
    for name in sorted(header, key=lambda k: (tuple(header[k]["data_offsets"]), k)):
        ordered[name] = header[name]
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[8 + n:]


def canonicalise_adapter_dir(adapter_dir: str | Path, *, set_fields: set[str] | None = None) -> None:
    """Rewrite a saved peft adapter folder so that identical weights give identical bytes.

    What peft 0.21 / safetensors 0.8 vary between runs with the same weights, and the fix:

    * ``adapter_config.json``: ``target_modules`` (a set in peft) is written in hash order, which
      follows PYTHONHASHSEED: sorted here, with every other set-valued field, keys sorted;
      ``base_model_name_or_path`` is the base model's local folder when it was loaded from one:
      dropped (null) then.
    * ``adapter_model.safetensors``: the header's ``__metadata__`` map is a Rust HashMap (random
      order per process once it has several keys): rewritten in sorted order.
    * ``README.md``: peft's model-card template (the base model's path, the peft version, no
      content): removed; nothing reads it.

    Each rewritten file is replaced atomically. Idempotent: a canonical folder is left as is.
    """
    from presdep.contracts.schemas import atomic_write

    d = Path(adapter_dir)
    for cfg_path in sorted(d.rglob("adapter_config.json")):
        raw = cfg_path.read_text(encoding="utf-8")
        cfg = _canonical_config(json.loads(raw), set(set_fields or ()))
        text = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
        if text != raw:
            atomic_write(cfg_path, lambda tmp, t=text: tmp.write_text(t, encoding="utf-8"))
    for st_path in sorted(d.rglob("*.safetensors")):
        raw_bytes = st_path.read_bytes()
        data = _canonical_safetensors(raw_bytes, st_path)
        if data != raw_bytes:
            atomic_write(st_path, lambda tmp, b=data: tmp.write_bytes(b))
    for card in sorted(d.rglob("README.md")):
        card.unlink()


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
    "LORA_KEYS", "lora_settings", "enable_checkpointing", "add_lora", "adapter_state", "load_adapter_state",
    "save_adapter", "canonicalise_adapter_dir", "load_adapter", "tiny_causal_lm",
]
