"""The ``transformers`` provider: a local chat model of ``models:``, greedy and offline.

The model is fetched once (``presdep.runtime.models.fetch_model``) into ``<models_root>/<key>``
unless a converted folder is given; generation reuses the frozen reader's batched,
left-padded greedy decoding, so answers are deterministic on one machine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from presdep.bench.reply import Reply
from presdep.contracts.errors import InvalidInput
from presdep.runtime.models import describe_model, fetch_model, load_model
from presdep.scoring.reader import FrozenReader

INSTRUCTION = "Solve the task. End with a final line of the form 'Answer: <answer>'."


class TransformersProvider:
    def __init__(self, *, model_key: str, spec: Mapping[str, Any] | None = None,
                 model_dir: str | os.PathLike | None = None, models_root: str | os.PathLike = "resources/models",
                 max_new_tokens: int = 24, batch_size: int = 8, device: str = "auto"):
        if model_dir is None:
            if spec is None:
                raise InvalidInput(f"transformers provider: model {model_key!r} needs a spec from models: or a model_dir")
            model_dir = Path(models_root) / model_key
            if not (model_dir / "config.json").exists():
                fetch_model(spec, model_dir)
        self.model_id = model_key
        self._desc = {"provider": "transformers", "model": model_key,
                      "spec": describe_model(spec) if spec is not None else {"source": "local"},
                      "max_new_tokens": int(max_new_tokens), "decoding": "greedy"}
        model, tok = load_model(Path(model_dir), device=device)
        self.reader = FrozenReader(model, tok, max_new_tokens=max_new_tokens, batch_size=batch_size)

    def describe(self) -> dict[str, Any]:
        return dict(self._desc)

    def prompt_ids(self, prompt: str) -> list[int]:
        tok = self.reader.tokenizer
        text = tok.apply_chat_template([{"role": "user", "content": f"{prompt}\n\n{INSTRUCTION}"}],
                                       tokenize=False, add_generation_prompt=True, enable_thinking=False)
        return list(tok.encode(text, add_special_tokens=False))

    def answer(self, tasks: Sequence[Mapping[str, Any]]) -> list[Reply]:
        texts = self.reader.generate([self.prompt_ids(t["prompt"]) for t in tasks])
        return [Reply(t) for t in texts]
