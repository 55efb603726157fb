"""The frozen reader's machinery: greedy, deterministic, batched generation from a chat model.

One reader serves every downstream consumer of a ranking: the QA reader
(:mod:`presdep.scoring.reader`) and the claim-verdict reader (:mod:`presdep.scoring.verdict_reader`)
differ only in their pinned :class:`ReaderPrompt` and in how a reply is read. The machinery is
shared: identical prompts generated once, similar lengths batched together with left padding,
finished batches flushed (a killed job resumes), and an optional content-addressed answer cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from presdep import __version__
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_text_atomic
from presdep.runtime.models import (
    dtype_name,
    load_causal_lm,
    load_tokenizer,
    model_identity,
    resolve_device,
    resolve_dtype,
)
from presdep.runtime.resume import partial_dir, resume_dir
from presdep.scoring.answer_cache import AnswerCache
from presdep.scoring.template import prepare_doc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReaderPrompt:
    """A pinned reader prompt: a user-message template with ``{paragraphs}`` and ``{question}``
    (the paragraphs as ``[i] text`` lines, each cut to ``max_doc_chars``) and an optional system
    message. Its name and sha256 go into every output the reader writes."""

    name: str
    user: str
    system: str | None = None

    @property
    def sha256(self) -> str:
        # A prompt without a system message keeps the digest of its template text alone.
        text = self.user if self.system is None else json.dumps({"system": self.system, "user": self.user})
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def render(self, question: str, paragraphs: Sequence[str], max_doc_chars: int | None = None) -> str:
        """The user message."""
        lines = [f"[{i}] {prepare_doc(p, max_doc_chars)}" for i, p in enumerate(paragraphs, start=1)]
        return self.user.format(paragraphs="\n".join(lines), question=prepare_doc(question, None))

    def messages(self, question: str, paragraphs: Sequence[str], max_doc_chars: int | None = None) -> list[dict]:
        user = {"role": "user", "content": self.render(question, paragraphs, max_doc_chars)}
        return ([{"role": "system", "content": self.system}] if self.system else []) + [user]


QA_PROMPT = ReaderPrompt(
    "qa_reader_v1",
    "Paragraphs:\n{paragraphs}\n\n"
    "Question: {question}\n"
    "Answer the question in a few words, using the paragraphs above.",
)


def _batch_name(batch: Sequence[tuple[int, ...]]) -> str:
    """A file name that changes with any token of any prompt of the batch."""
    h = hashlib.sha256()
    for k in batch:
        h.update(np.asarray(k, dtype=np.int64).tobytes() + b"|")
    return "batch-" + h.hexdigest()[:40] + ".json"


class FrozenReader:
    """Greedy, deterministic, batched answers from a chat model (transformers).

    ``model`` may be None with a ``model_loader``: the weights are loaded on the first
    prompt the answer cache (:meth:`use_answer_cache`) does not hold, so a job whose
    prompts were all answered before never loads them.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 16, batch_size: int = 8,
                 max_doc_chars: int | None = 1200, model_loader: Any = None, model_name: str | None = None,
                 prompt: ReaderPrompt | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise InvalidInput(f"reader tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template")
        if max_new_tokens < 1 or batch_size < 1:
            raise InvalidInput("max_new_tokens and batch_size must be >= 1")
        if (model is None) == (model_loader is None):
            raise InvalidInput("give exactly one of model and model_loader")
        self._model, self._model_loader = (model.eval() if model is not None else None), model_loader
        self.model_name = model_name if model is None else getattr(model.config, "_name_or_path", None)
        self.tokenizer = tokenizer
        self.prompt = prompt or QA_PROMPT
        self.max_new_tokens, self.batch_size, self.max_doc_chars = int(max_new_tokens), int(batch_size), max_doc_chars
        eos = tokenizer.eos_token_id
        if eos is None:
            raise InvalidInput("reader tokenizer has no eos token: generation could not stop")
        self.eos_id = int(eos)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)
        self.answer_cache = None
        self.generated = 0  # prompts the model generated for (the rest came from the cache)

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = self._model_loader().eval()
        return self._model

    @property
    def model_loaded(self) -> bool:
        return self._model is not None

    def use_answer_cache(self, root: str | os.PathLike, identity: Mapping[str, Any]) -> Any:
        """Answer through an :class:`presdep.scoring.answer_cache.AnswerCache` under ``root``; returns it.

        ``identity``: what identifies the model and its numbers (pin or weights hash, dtype,
        device type); the decoding settings and library versions are added here.
        """
        import torch
        import transformers

        self.answer_cache = AnswerCache(root, {
            **dict(identity), "decoding": "greedy", "max_new_tokens": self.max_new_tokens,
            "batch_size": self.batch_size, "eos_id": self.eos_id, "pad_id": self.pad_id,
            "torch": torch.__version__, "transformers": transformers.__version__,
        })
        return self.answer_cache

    def prompt_ids(self, question: str, paragraphs: Sequence[str]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            self.prompt.messages(question, paragraphs, self.max_doc_chars),
            tokenize=False, add_generation_prompt=True, enable_thinking=False,
        )
        # The chat template writes any special tokens itself.
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def generate(self, prompts: Sequence[Sequence[int]], progress: bool = False,
                 done_dir: str | os.PathLike | None = None) -> list[str]:
        """Decoded continuations, one per prompt; duplicates are generated once.

        With an answer cache, prompts it holds are not generated again, and each
        generated batch is stored there at once. With ``done_dir``, each finished
        batch is also flushed there (atomically) and batches already there are
        reused: a killed job resumes where it stopped. The batches are cut from the
        prompts left before any is skipped, so a resumed run batches (and pads)
        exactly as an uninterrupted one.
        """
        keys = [tuple(int(t) for t in p) for p in prompts]
        unique = sorted(set(keys), key=lambda k: (-len(k), k))  # similar lengths share a batch
        done: dict[tuple[int, ...], str] = {}
        cache = self.answer_cache
        if cache is not None:
            from presdep.scoring.answer_cache import prompt_key

            pkey = {k: prompt_key(k) for k in unique}
            found = cache.lookup(list(pkey.values()))  # includes answers other jobs finished meanwhile
            done = {k: found[pk] for k, pk in pkey.items() if pk in found}
            unique = [k for k in unique if k not in done]
        batches = [unique[i : i + self.batch_size] for i in range(0, len(unique), self.batch_size)]
        files = [Path(done_dir) / _batch_name(b) for b in batches] if done_dir is not None else [None] * len(batches)
        reused = 0
        for batch, path in zip(batches, files):
            if path is not None and path.exists():
                done.update(zip(batch, json.loads(path.read_text(encoding="utf-8"))))
                reused += 1
        if reused:
            log.info("resuming: %d of %d batches were answered by an earlier run", reused, len(batches))
        todo = [(b, p) for b, p in zip(batches, files) if b[0] not in done]
        if todo:
            self._generate_batches(todo, done, progress, initial=len(batches) - len(todo), total=len(batches))
        if cache is not None:
            cache.flush()
        return [done[k] for k in keys]

    def _generate_batches(self, todo, done: dict, progress: bool, *, initial: int, total: int) -> None:
        import torch
        from tqdm.auto import tqdm
        from transformers import GenerationConfig

        gen = GenerationConfig(
            do_sample=False, num_beams=1, max_new_tokens=self.max_new_tokens,
            pad_token_id=self.pad_id, eos_token_id=self.eos_id,
        )
        model = self.model
        device = next(model.parameters()).device
        cache = self.answer_cache
        with tqdm(total=total, initial=initial, desc="read", unit="batch", disable=not progress) as bar:
            for batch, path in todo:
                width = max(len(k) for k in batch)
                ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for r, k in enumerate(batch):  # left padding: every prompt ends where generation starts
                    ids[r, width - len(k):] = torch.tensor(k, dtype=torch.long)
                    mask[r, width - len(k):] = 1
                with torch.inference_mode():
                    out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                         generation_config=gen)
                texts = [self.tokenizer.decode(out[r, width:].tolist(), skip_special_tokens=True)
                         for r in range(len(batch))]
                done.update(zip(batch, texts))
                self.generated += len(batch)
                if path is not None:
                    write_text_atomic(path, json.dumps(texts))
                if cache is not None:
                    from presdep.scoring.answer_cache import prompt_key

                    for k, t in zip(batch, texts):
                        cache.put(prompt_key(k), t)
                    cache.flush()  # each batch is stored as soon as it is generated
                bar.update(1)

    def generate_for(self, items: Sequence[tuple[str, Sequence[str]]], progress: bool = False,
                     done_dir: str | os.PathLike | None = None) -> list[str]:
        """Generated texts (raw) for (question, paragraphs in order) items."""
        return self.generate([self.prompt_ids(q, ps) for q, ps in items], progress, done_dir)

    def answer(self, items: Sequence[tuple[str, Sequence[str]]], extract: Callable[[str], Any],
               progress: bool = False, done_dir: str | os.PathLike | None = None) -> list[Any]:
        """Each generated text read by ``extract`` (the consumer's rule for a reply)."""
        return [extract(t) for t in self.generate_for(items, progress, done_dir)]

    def describe(self) -> dict:
        return {
            "prompt": self.prompt.name, "prompt_sha256": self.prompt.sha256,
            "max_new_tokens": self.max_new_tokens, "max_doc_chars": self.max_doc_chars,
            "decoding": "greedy", "model": self.model_name,
        }


def job_reader(cfg: Mapping[str, Any], model_dir: str | os.PathLike, max_doc_chars: int | None, prompt: ReaderPrompt,
               *, out_path: str | os.PathLike, answer_cache: str | os.PathLike | None,
               model_spec: Mapping[str, Any] | None, threads: int | None) -> tuple[FrozenReader, Path | None]:
    """A reader job's reader (weights loaded only when a prompt is not in the answer cache) and, without
    a cache, the folder its finished batches go to (``<out>.partial/``: a killed job resumes)."""
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    device = resolve_device(cfg["device"])
    dtype = resolve_dtype(cfg["dtype"], device)
    reader = FrozenReader(None, load_tokenizer(str(model_dir)), max_new_tokens=int(cfg["max_new_tokens"]),
                          batch_size=int(cfg["batch_size"]), max_doc_chars=max_doc_chars, prompt=prompt,
                          model_loader=lambda: load_causal_lm(str(model_dir), device=str(device), dtype=dtype),
                          model_name=str(model_dir))
    if answer_cache is not None:
        reader.use_answer_cache(answer_cache, {
            "model": model_identity({**dict(model_spec or {}), "path": str(model_dir)}),
            "dtype": dtype_name(dtype), "device_type": device.type,
        })
        return reader, None
    # Finished batches survive a kill; they depend on the model, the decoding and the batching
    # (padding), never on which presentation asked for a prompt.
    fingerprint = json.dumps({
        "presdep_version": __version__, "reader": reader.describe(), "batch_size": reader.batch_size,
        "device": str(device), "dtype": str(dtype), "model_files": files_identity(model_dir),
    }, sort_keys=True, default=str)
    return reader, resume_dir(partial_dir(out_path), fingerprint)


# How a reading job's log names its answer cache's counters (benchmarks/default_profile.py reads it).
ANSWER_CACHE_MARK = "answer cache "


def finish_job_reader(reader: FrozenReader) -> dict:
    """The answer cache's identity for the answers file's facts, after the job's shard is
    written (none without a cache). Its hits and misses depend on what earlier and concurrent
    jobs answered, so they go to the log (one ``answer cache {json}`` line), not the file."""
    if reader.answer_cache is None:
        return {}
    reader.answer_cache.write_job_shard()  # one shard per job: every answer it used
    stats = reader.answer_cache.stats()
    log.info("%s%s", ANSWER_CACHE_MARK, json.dumps(stats, sort_keys=True))
    return {"answer_cache": reader.answer_cache.provenance()}


def files_identity(model_dir: str | os.PathLike) -> list[tuple[str, int, int]]:
    """(name, size, mtime) of every file of a model directory: changes when the weights are replaced."""
    root = Path(model_dir)
    return sorted((str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in root.rglob("*") if f.is_file())


__all__ = ["ANSWER_CACHE_MARK", "QA_PROMPT", "FrozenReader", "ReaderPrompt", "files_identity", "finish_job_reader",
           "job_reader"]
