"""Generative listwise reranking, RankZephyr style: a sliding window over the presented list.

Each window of ``window`` documents (default 20) is shown with identifiers [1]..[w]
and the model greedily writes a permutation "[3] > [1] > ...". Windows move from the
bottom of the list up by ``stride`` (default 10), so strong documents bubble to the top.
A document's score is its final rank read backwards (n - rank), so higher is better.

Parsing is strict: the whole reply must be identifiers joined by ">", each of 1..w
exactly once. Anything else is a parse failure, counted per run and repaired by a rule
that never looks at the presented order (that would manufacture order dependence):

    the identifiers the reply does name, in range and at their first occurrence, keep
    the model's order at the top; the documents it leaves out follow, ordered by the
    sha256 of their text (a content order, the same under every presentation).

A reply with no usable identifier is therefore ranked wholly by content hash.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.runtime.models import describe_model
from presdep.scoring.hf_load import batch_size_of, load_hf
from presdep.scoring.template import prepare_doc

# The RankZephyr / RankGPT prompt (castorini/rank_llm), one window of ``num`` passages.
SYSTEM = "You are RankLLM, an intelligent assistant that can rank passages based on their relevancy to the query."
PREFIX = ("I will provide you with {num} passages, each indicated by a numerical identifier []. "
          "Rank the passages based on their relevance to the search query: {query}.\n")
SUFFIX = ("Search Query: {query}.\nRank the {num} passages above based on their relevance to the search query. "
          "All the passages should be included and listed using identifiers, in descending order of relevance. "
          "The output format should be [] > [], e.g., [4] > [2], Only respond with the ranking results, "
          "do not say any word or explain.")
_STRICT = re.compile(r"\s*\[(\d+)\](?:\s*>\s*\[(\d+)\])*\s*")
_ID = re.compile(r"\[(\d+)\]")


def window_messages(query: str, docs: Sequence[str]) -> list[dict]:
    body = "\n".join(f"[{i}] {d}" for i, d in enumerate(docs, start=1))
    user = PREFIX.format(num=len(docs), query=query) + "\n" + body + "\n" + SUFFIX.format(num=len(docs), query=query)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_strict(reply: str, w: int) -> list[int] | None:
    """0-based permutation of 0..w-1, or None when the reply is not exactly one."""
    if not _STRICT.fullmatch(reply):
        return None
    ids = [int(x) - 1 for x in _ID.findall(reply)]
    return ids if sorted(ids) == list(range(w)) else None


def content_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def repair(reply: str, docs: Sequence[str]) -> list[int]:
    """The documented repair: named identifiers first (model order), the rest by content hash."""
    w = len(docs)
    named: list[int] = []
    for x in _ID.findall(reply):
        i = int(x) - 1
        if 0 <= i < w and i not in named:
            named.append(i)
    rest = sorted((i for i in range(w) if i not in named), key=lambda i: (content_key(docs[i]), docs[i]))
    return named + rest


def windows(n: int, window: int, stride: int) -> list[tuple[int, int]]:
    """[start, end) windows from the bottom of an n-list up (rank_llm's sliding order)."""
    if n <= window:
        return [(0, n)]
    out, end = [], n
    while True:
        start = max(0, end - window)
        out.append((start, end))
        if start == 0:
            return out
        end -= stride


@dataclass
class _Run:
    query: str
    order: list[int]  # current ranking: indices into the prompt's docs
    docs: Sequence[str]


class GenerativeListwiseScorer(PromptScorer):
    """``generate(list of chat messages) -> list of replies`` does the model work (greedy)."""

    name = "generative_listwise"
    template_sha256 = None

    def __init__(self, generate: Callable[[list[list[dict]]], list[str]], *, window: int, stride: int,
                 max_doc_chars: int | None = None, model_desc: Mapping[str, Any] | None = None):
        if window < 2 or not 1 <= stride < window:
            raise InvalidInput(f"generative_listwise needs window >= 2 and 1 <= stride < window, got {window}, {stride}")
        self.generate = generate
        self.window, self.stride = int(window), int(stride)
        self.max_doc_chars = max_doc_chars
        self.model_desc = dict(model_desc or {})
        self.windows_read = 0
        self.parse_failures = 0
        self._pending = {"windows": 0, "parse_failures": 0}

    def describe(self) -> dict:
        return {"scorer": self.name, "model": self.model_desc, "window": self.window, "stride": self.stride,
                "decoding": "greedy",
                "repair": "named identifiers first in the model's order, the rest by sha256 of their text"}

    def take_stats(self) -> dict:
        """Counts since the last call (the scoring loop stores them per query, so a resumed run adds up)."""
        out, self._pending = self._pending, {"windows": 0, "parse_failures": 0}
        return out

    def rank_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[int]]:
        runs = [_Run(q, list(range(len(d))), [prepare_doc(x, self.max_doc_chars) for x in d]) for q, d in prompts]
        plans = [windows(len(r.docs), self.window, self.stride) for r in runs]
        for step in range(max(len(p) for p in plans)):  # window k of every prompt in one batch
            live = [(r, p[step]) for r, p in zip(runs, plans) if step < len(p) and p[step][1] - p[step][0] > 1]
            if not live:
                continue
            msgs = [window_messages(r.query, [r.docs[i] for i in r.order[s:e]]) for r, (s, e) in live]
            replies = self.generate(msgs)
            if len(replies) != len(live):
                raise RuntimeError(f"generate returned {len(replies)} replies for {len(live)} windows")
            for (r, (s, e)), reply in zip(live, replies):
                seg = r.order[s:e]
                perm = parse_strict(reply, len(seg))
                self.windows_read += 1
                self._pending["windows"] += 1
                if perm is None:
                    self.parse_failures += 1
                    self._pending["parse_failures"] += 1
                    perm = repair(reply, [r.docs[i] for i in seg])
                r.order[s:e] = [seg[i] for i in perm]
        return [r.order for r in runs]

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        out = []
        for (_, docs), order in zip(prompts, self.rank_prompts(prompts)):
            score = [0.0] * len(docs)
            for rank, i in enumerate(order):
                score[i] = float(len(docs) - rank)
            out.append([GradeReadout(s, None) for s in score])
        return out


def hf_generate(model: Any, tokenizer: Any, max_new_tokens: int, batch_size: int):
    """Greedy chat generation with a Hugging Face causal LM (left padding for batches)."""
    import torch

    def run(batch: list[list[dict]]) -> list[str]:
        out: list[str] = []
        for i in range(0, len(batch), batch_size):
            texts = [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
                     for m in batch[i : i + batch_size]]
            rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
            width = max(len(r) for r in rows)
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
            ids = torch.full((len(rows), width), int(pad or 0), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, r in enumerate(rows):
                ids[j, width - len(r):] = torch.tensor(r)
                mask[j, width - len(r):] = 1
            dev = next(model.parameters()).device
            with torch.inference_mode():
                gen = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), do_sample=False,
                                     max_new_tokens=max_new_tokens, pad_token_id=int(pad or 0))
            out += [tokenizer.decode(g[width:], skip_special_tokens=True) for g in gen]
        return out

    return run


def make_generative_listwise(run: ScoringRun, prompt: PromptSettings) -> GenerativeListwiseScorer:
    spec = run.model_entry()
    model, tok = load_hf(spec, "AutoModelForCausalLM")
    return GenerativeListwiseScorer(
        hf_generate(model, tok, int(run.setting("max_new_tokens")), batch_size_of(spec)),
        window=int(run.setting("window")), stride=int(run.setting("stride")),
        max_doc_chars=prompt.max_doc_chars, model_desc=describe_model(spec),
    )


__all__ = ["GenerativeListwiseScorer", "window_messages", "parse_strict", "repair", "windows", "content_key",
           "hf_generate", "make_generative_listwise"]
