"""The frozen QA reader: answers each question from each presentation's top-k paragraphs.

For every (perturbation, query, presentation) of a QA ``scores`` file (the
presentations decision metrics compare, :func:`presdep.contracts.views.decision_presentations`:
random shuffles 0..M-1, or BSC's ensembles; within_chunk and middle_injection as
stored; the first-stage pass is not read):

1. the reader gets the top ``k`` paragraphs of that presentation's ranking (k = 5
   by default, 3 allowed), ordered by (-score, position): highest score first,
   ties to the paragraph shown earlier (docs/methods/answer-flip.md). No threshold
   is involved;
2. each paragraph is tagged ``[i]`` and cut to ``max_doc_chars`` the way the scorer
   cuts documents;
3. a chat model answers greedily (no sampling, one beam, ``max_new_tokens``
   short), in left-padded batches. Identical prompts are generated once and
   share the answer, so two presentations with the same top-k in the same order
   cannot flip through batch composition;
4. the stored ``answer`` follows the reader's ``answer_extraction`` rule, recorded in
   the answers file: ``paper`` (the default, the paper's rule, :func:`paper_answer`) =
   the first line of the generated text with a leading ``Answer:`` stripped;
   ``lenient`` (for small readers, not the paper's, :func:`clean_answer`) = the first
   line with content after any answer label ("Answer:", "The answer is", markdown
   around it; a label alone on its line hands over to the next line), surrounding
   quotes/asterisks and a trailing full stop removed. ``raw_answer`` keeps the
   generated text as it came. SQuAD normalisation is left to the metrics;
5. finished batches are flushed to ``<out>.partial/``, so a killed job resumes
   and writes the file an uninterrupted run would have written.

The reader prompt is part of the method: :data:`READER_PROMPT` and its sha256 go
into the output's metadata, with k.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from presdep import __version__
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_table, write_text_atomic
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import BATCH_NOISE, decision_presentations
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

READER_PROMPT_NAME = "qa_reader_v1"
READER_PROMPT = (
    "Paragraphs:\n{paragraphs}\n\n"
    "Question: {question}\n"
    "Answer the question in a few words, using the paragraphs above."
)
READER_PROMPT_SHA256 = hashlib.sha256(READER_PROMPT.encode("utf-8")).hexdigest()
# Settings the job needs (the validated config's reader section, device/dtype from the model entry).
READER_KEYS = ("k", "max_new_tokens", "batch_size", "device", "dtype", "answer_extraction")


READER_K = (3, 5)


@dataclass(frozen=True)
class Context:
    """What the reader sees for one presentation."""

    perturbation: str
    query_id: str
    presentation: int
    doc_ids: tuple[str, ...]  # the top k, highest score first (ties: shown earlier first)


def top_k_contexts(scores: pl.DataFrame, k: int, *, bsc_k: int = 1, ensembles: int = 4) -> list[Context]:
    """One :class:`Context` per perturbation x query x presentation (first-stage pass excluded).

    ``bsc_k``/``ensembles`` say how random shuffles become presentations (BSC
    ensembles when ``bsc_k > 1``); other perturbations are read as stored.
    """
    if k not in READER_K:
        raise InvalidInput(f"reader k must be one of {READER_K}, got {k!r}")
    perts = sorted(set(scores["perturbation"].unique().to_list()) - {FIRST_STAGE, BATCH_NOISE})
    if not perts:
        raise InvalidInput("scores have no presentations to read (only the first-stage pass)")
    out: list[Context] = []
    for pert in perts:
        is_shuffle = pert == "random_shuffle"
        view = decision_presentations(scores, bsc_k=bsc_k if is_shuffle else 1, ensembles=ensembles,
                                      perturbation=pert)
        ranked = view.sort("query_id", "presentation", pl.col("score"), "position",
                           descending=[False, False, True, False])
        top = ranked.group_by("query_id", "presentation", maintain_order=True).agg(pl.col("doc_id").head(k))
        out += [Context(pert, q, int(m), tuple(d)) for q, m, d in top.iter_rows()]
    return out


def render_prompt(question: str, paragraphs: Sequence[str], max_doc_chars: int | None = None) -> str:
    """The user message of the reader."""
    lines = [f"[{i}] {prepare_doc(p, max_doc_chars)}" for i, p in enumerate(paragraphs, start=1)]
    return READER_PROMPT.format(paragraphs="\n".join(lines), question=prepare_doc(question, None))


# "Answer:", "Final answer -", "The answer is", "The answer is:" (a label, not the answer).
_LABEL = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer(?:\s+is\b\s*[:\-]?|\s*[:\-])\s*", re.IGNORECASE)


ANSWER_EXTRACTIONS = ("paper", "lenient")


def paper_answer(text: str) -> str:
    """The paper's answer: the reply's first line, a leading ``Answer:`` stripped."""
    lines = text.strip().splitlines()
    line = lines[0].strip() if lines else ""
    return line[len("Answer:"):].strip() if line.startswith("Answer:") else line


def extract_answer(text: str, rule: str = "paper") -> str:
    """The stored answer of a generated text under a named rule (``ANSWER_EXTRACTIONS``)."""
    if rule == "paper":
        return paper_answer(text)
    if rule == "lenient":
        return clean_answer(text)
    raise InvalidInput(f"unknown answer_extraction {rule!r}; expected one of {ANSWER_EXTRACTIONS}")


def clean_answer(text: str) -> str:
    """The first line with content after an answer label ("Answer:", "The answer is"),
    without surrounding quotes/asterisks or a trailing full stop.

    A label alone on its line ("The answer is:\n2016") hands over to the next line.
    """
    line = ""
    for raw in text.splitlines():
        line = _LABEL.sub("", raw.strip().lstrip("*#> ")).strip()  # markdown before a label
        if line:
            break
    while True:  # quotes, asterisks and trailing full stops, in any nesting
        cut = line.strip().strip("\"'`*").strip().rstrip(".")
        if cut == line:
            return line
        line = cut


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
                 max_doc_chars: int | None = 1200, model_loader: Any = None, model_name: str | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise InvalidInput(f"reader tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template")
        if max_new_tokens < 1 or batch_size < 1:
            raise InvalidInput("max_new_tokens and batch_size must be >= 1")
        if (model is None) == (model_loader is None):
            raise InvalidInput("give exactly one of model and model_loader")
        self._model, self._model_loader = (model.eval() if model is not None else None), model_loader
        self.model_name = model_name if model is None else getattr(model.config, "_name_or_path", None)
        self.tokenizer = tokenizer
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
            [{"role": "user", "content": render_prompt(question, paragraphs, self.max_doc_chars)}],
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

    def answer(self, items: Sequence[tuple[str, Sequence[str]]], progress: bool = False,
               done_dir: str | os.PathLike | None = None, extraction: str = "paper") -> list[str]:
        """Extracted answers for (question, paragraphs in order) items."""
        return [extract_answer(t, extraction) for t in self.generate_for(items, progress, done_dir)]

    def describe(self) -> dict:
        return {
            "prompt": READER_PROMPT_NAME, "prompt_sha256": READER_PROMPT_SHA256,
            "max_new_tokens": self.max_new_tokens, "max_doc_chars": self.max_doc_chars,
            "decoding": "greedy", "model": self.model_name,
        }


def read_answers(
    scores: pl.DataFrame,
    candidates: pl.DataFrame,
    reader: FrozenReader,
    *,
    k: int,
    bsc_k: int = 1,
    ensembles: int = 4,
    progress: bool = False,
    done_dir: str | os.PathLike | None = None,
    extraction: str = "paper",
) -> tuple[pl.DataFrame, dict]:
    """The ``answers`` table (query_id, perturbation, presentation, answer, raw_answer) and run facts."""
    if extraction not in ANSWER_EXTRACTIONS:
        raise InvalidInput(f"unknown answer_extraction {extraction!r}; expected one of {ANSWER_EXTRACTIONS}")
    contexts = top_k_contexts(scores, k, bsc_k=bsc_k, ensembles=ensembles)
    texts = {(q, d): x for q, d, x in candidates.select("query_id", "doc_id", "doc").iter_rows()}
    questions = dict(candidates.select("query_id", "query").unique("query_id").iter_rows())
    items = []
    for c in contexts:
        if c.query_id not in questions:
            raise InvalidInput(f"scores name query {c.query_id!r}, which is not in the candidates")
        missing = [d for d in c.doc_ids if (c.query_id, d) not in texts]
        if missing:
            raise InvalidInput(f"scores name doc(s) {missing[:3]} of query {c.query_id!r} that are not in the candidates")
        items.append((questions[c.query_id], [texts[(c.query_id, d)] for d in c.doc_ids]))
    raw = reader.generate_for(items, progress=progress, done_dir=done_dir)
    df = pl.DataFrame(
        {
            "query_id": [c.query_id for c in contexts],
            "perturbation": [c.perturbation for c in contexts],
            "presentation": pl.Series([c.presentation for c in contexts], dtype=pl.Int32),
            "answer": [extract_answer(t, extraction) for t in raw],
            "raw_answer": raw,
        }
    )
    facts = {"k": k, "bsc_k": bsc_k, "presentations": len(contexts), "unique_prompts": len(set(map(repr, items))),
             "answer_extraction": extraction}
    return df, facts


def read_answers_files(
    *,
    scores_path: str | os.PathLike,
    candidates_path: str | os.PathLike,
    out_path: str | os.PathLike,
    reader_config: Mapping[str, Any],
    model_dir: str | os.PathLike,
    max_doc_chars: int | None = 1200,
    threads: int | None = None,
    answer_cache: str | os.PathLike | None = None,
    model_spec: Mapping[str, Any] | None = None,
) -> pl.DataFrame:
    """The ``read_answers`` job: answer (loading the reader model only if a prompt is not in
    the answer cache), write the ``answers`` contract.

    ``answer_cache``: the answer cache's folder; ``model_spec`` (the reader's ``models``
    entry) names the model there by its pin where it has one. Without a cache, finished
    batches go to ``<out>.partial/`` so a killed job resumes.
    """
    cfg = dict(reader_config)
    missing = [k for k in READER_KEYS if k not in cfg]
    if missing:
        raise InvalidInput(f"reader config lacks {missing} (k = paragraphs per presentation, one of {READER_K}); "
                         f"got {sorted(cfg)}")
    source = read_metadata(scores_path)
    # BSC's presentations are ensembles of K shuffles: the scores file says which.
    if "bsc_k" not in source or "bsc_ensembles" not in source:
        raise InvalidInput(f"{scores_path}: scores metadata lacks bsc_k/bsc_ensembles (written by an older presdep?); "
                         "score the run again")
    bsc_k, ensembles = int(source["bsc_k"]), int(source["bsc_ensembles"])
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    device = resolve_device(cfg["device"])
    dtype = resolve_dtype(cfg["dtype"], device)
    reader = FrozenReader(None, load_tokenizer(str(model_dir)), max_new_tokens=int(cfg["max_new_tokens"]),
                          batch_size=int(cfg["batch_size"]), max_doc_chars=max_doc_chars,
                          model_loader=lambda: load_causal_lm(str(model_dir), device=str(device), dtype=dtype),
                          model_name=str(model_dir))
    done_dir = None
    if answer_cache is not None:
        reader.use_answer_cache(answer_cache, {
            "model": model_identity({**dict(model_spec or {}), "path": str(model_dir)}),
            "dtype": dtype_name(dtype), "device_type": device.type,
        })
    else:
        # Finished batches survive a kill; they depend on the model, the decoding and
        # the batching (padding), never on which presentation asked for a prompt.
        fingerprint = json.dumps({
            "presdep_version": __version__, "reader": reader.describe(), "batch_size": reader.batch_size,
            "device": str(device), "dtype": str(dtype), "model_files": _files_identity(model_dir),
        }, sort_keys=True, default=str)
        done_dir = resume_dir(partial_dir(out_path), fingerprint)
    answers, facts = read_answers(
        read_table(scores_path, "scores"), read_table(candidates_path, "candidates"), reader,
        k=int(cfg["k"]), bsc_k=bsc_k, ensembles=ensembles, progress=True, done_dir=done_dir,
        extraction=cfg["answer_extraction"],
    )
    if reader.answer_cache is not None:
        reader.answer_cache.compact_written()  # one shard per job, however many batches it flushed
        facts["answer_cache"] = reader.answer_cache.stats()
    log.info("answered %d presentations (%d distinct prompts, %d generated, model %s) from the top %d paragraphs",
             facts["presentations"], facts["unique_prompts"], reader.generated,
             "loaded" if reader.model_loaded else "not loaded", facts["k"])
    write_table(
        answers.sort("perturbation", "query_id", "presentation"), out_path, "answers",
        {"reader": dict(cfg), "max_doc_chars": max_doc_chars, "scores": str(scores_path)},
        k=int(cfg["k"]), reader=reader.describe(), facts=facts, answer_extraction=facts["answer_extraction"],
        scores_params=source.get("params"), template_sha256=source.get("template_sha256"),
    )
    if done_dir is not None:
        shutil.rmtree(done_dir)
    return answers


def _files_identity(model_dir: str | os.PathLike) -> list[tuple[str, int, int]]:
    """(name, size, mtime) of every file of a model directory: changes when the weights are replaced."""
    root = Path(model_dir)
    return sorted((str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in root.rglob("*") if f.is_file())


__all__ = [
    "ANSWER_EXTRACTIONS", "READER_K", "READER_PROMPT", "READER_PROMPT_SHA256", "Context", "FrozenReader",
    "clean_answer", "extract_answer", "paper_answer", "read_answers", "read_answers_files", "render_prompt",
    "top_k_contexts",
]
