"""Load a Hugging Face model of any head class from a variant's model entry.

The families read the same ``models:`` entry as the readout (a fetched directory at
``path``, else an ``hf`` id at its pinned ``revision``); only the auto class differs.
"""

from __future__ import annotations

from typing import Any, Mapping

from presdep.contracts.errors import InvalidInput
from presdep.runtime.models import model_location, resolve_device, resolve_dtype


def pad_id(tokenizer: Any) -> int:
    """The id that pads a batch: the tokenizer's pad token, else its end-of-text token."""
    for attr in ("pad_token_id", "eos_token_id"):
        v = getattr(tokenizer, attr, None)
        if v is not None:
            return int(v)
    return 0


def where(spec: Mapping[str, Any]) -> tuple[str, dict]:
    """(directory or hub id, from_pretrained keywords) of a model entry."""
    return model_location(spec)


def load_hf(spec: Mapping[str, Any], auto_class: str, *, trust_remote_code: bool | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode on the entry's device and dtype.

    ``auto_class`` names a transformers class ("AutoModelForSequenceClassification", ...).
    ``trust_remote_code`` defaults to the entry's own flag (the schema's default is false).
    """
    import transformers

    loc, kw = where(spec)
    trc = bool(spec.get("trust_remote_code")) if trust_remote_code is None else trust_remote_code
    dev = resolve_device(spec.get("device") or "auto")
    dt = resolve_dtype(spec.get("dtype") or "auto", dev)
    cls = getattr(transformers, auto_class)
    model = cls.from_pretrained(loc, dtype=dt, trust_remote_code=trc, **kw)
    tok = transformers.AutoTokenizer.from_pretrained(loc, trust_remote_code=trc, **kw)
    return model.to(dev).eval(), tok


def batch_size_of(spec: Mapping[str, Any]) -> int:
    """The entry's batch_size (the validated config fills it from the schema)."""
    if "batch_size" not in spec:
        raise InvalidInput(f"model entry {dict(spec)} lacks 'batch_size' (the validated config fills it)")
    return int(spec["batch_size"])
