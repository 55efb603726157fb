"""Order-invariant pointwise scorers: cross-encoders, the mxbai-rerank v2 family, reward models.

Each reads one (query, document) pair at a time, so a document's score cannot depend
on the presentation. To make that exact in floating point too (padding in a batch
can move a logit in its last bits and flip a near-tie), every distinct pair is scored
once per run, in a fixed order (sorted texts), and reused for every presentation.

* ``cross_encoder``: ``AutoModelForSequenceClassification`` on the (query, document)
  text pair; one label = its logit, two labels = logit(1) - logit(0).
* ``reward_model``: a Bradley-Terry reward model (Skywork-Reward-V2 and the like):
  the conversation [user: prompt, assistant: response] through the tokenizer's chat
  template, the single logit is the reward.
* ``mxbai_rerank``: the mxbai-rerank v2 family, a causal LM read as a binary judge:
  its published prompt (system, "query: ...", "document: ...", the task text ending
  in "Relevance:") and score = logit("1") - logit("0") at the last prompt token.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.runtime.models import describe_model
from presdep.scoring.hf_load import batch_size_of, load_hf, pad_id


class PairCache:
    """Scores each distinct (query, document) pair once, in sorted order, in batches."""

    def __init__(self, score_batch: Callable[[list[tuple[str, str]]], list[float]], batch_size: int):
        if batch_size < 1:
            raise InvalidInput(f"batch_size must be >= 1, got {batch_size}")
        self.score_batch = score_batch
        self.batch_size = batch_size
        self.cache: dict[tuple[str, str], float] = {}

    def scores(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        todo = sorted({(q, d) for q, docs in prompts for d in docs} - self.cache.keys())
        for i in range(0, len(todo), self.batch_size):
            part = todo[i : i + self.batch_size]
            got = self.score_batch(part)
            if len(got) != len(part):
                raise RuntimeError(f"pointwise model returned {len(got)} scores for {len(part)} pairs")
            self.cache.update(zip(part, (float(x) for x in got)))
        return [[self.cache[(q, d)] for d in docs] for q, docs in prompts]


class PointwiseScorer(PromptScorer):
    """Shared shell: ``score_batch`` maps (query, doc) pairs to one real score each."""

    name = "pointwise"
    template_sha256 = None

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 8, max_length: int | None = None,
                 model_desc: Mapping[str, Any] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.model_desc = dict(model_desc or {"class": type(model).__name__})
        self.pairs = PairCache(self.score_batch, batch_size)

    @property
    def device(self):
        return next(self.model.parameters()).device

    def describe(self) -> dict:
        return {"scorer": self.name, "model": self.model_desc, "order_invariant": True,
                "reuse": "each distinct (query, document) pair scored once per run"}

    def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        return [[GradeReadout(s, None) for s in row] for row in self.pairs.scores(prompts)]


class CrossEncoderScorer(PointwiseScorer):
    name = "cross_encoder"

    def score_batch(self, pairs):
        import torch

        enc = self.tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation=True,
                             max_length=self.max_length, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            logits = self.model(**enc).logits.float()
        if logits.shape[-1] == 1:
            return logits[:, 0].tolist()
        if logits.shape[-1] == 2:
            return (logits[:, 1] - logits[:, 0]).tolist()
        raise InvalidInput(f"cross_encoder: the model has {logits.shape[-1]} labels; expected 1 (a relevance logit) "
                         "or 2 (not relevant, relevant)")


class RewardModelScorer(PointwiseScorer):
    """A Bradley-Terry reward: the conversation's single logit (higher = better response)."""

    name = "reward_model"

    def _ids(self, prompt: str, response: str) -> list[int]:
        conv = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        text = self.tokenizer.apply_chat_template(conv, tokenize=False)
        bos = getattr(self.tokenizer, "bos_token", None)
        if bos and text.startswith(bos):
            text = text[len(bos):]  # the tokenizer adds it again; one BOS, as the model card does
        ids = self.tokenizer(text)["input_ids"]
        return ids[-self.max_length:] if self.max_length else ids

    def score_batch(self, pairs):
        import torch

        rows = [self._ids(q, d) for q, d in pairs]
        width = max(len(r) for r in rows)
        pad = pad_id(self.tokenizer)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # right padding: the head reads each row's last real token
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = pad
        with torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits.float()
        if logits.shape[-1] != 1:
            raise InvalidInput(f"reward_model: the model has {logits.shape[-1]} labels; a Bradley-Terry reward has 1")
        return logits[:, 0].tolist()


# The mxbai-rerank v2 prompt as published (mixedbread-ai/mxbai-rerank, mxbai_rerank_v2.py).
MXBAI_PREFIX = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                "<|im_start|>user\n")
MXBAI_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
MXBAI_TASK = ("You are a search relevance expert who evaluates how well documents match search queries. For each "
              "query-document pair, carefully analyze the semantic relationship between them, then provide your "
              "binary relevance judgment (0 for not relevant, 1 for relevant).\nRelevance:")


def mxbai_prompt(query: str, document: str, instruction: str | None = None) -> str:
    body = (f"instruction: {instruction}\n" if instruction else "") + f"query: {query}\ndocument: {document}\n"
    return MXBAI_PREFIX + body + MXBAI_TASK + MXBAI_SUFFIX


def single_token_id(tokenizer: Any, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise InvalidInput(f"{text!r} is {len(ids)} tokens for this tokenizer ({ids}); the judge reads one token")
    return int(ids[0])


class MxbaiRerankScorer(PointwiseScorer):
    name = "mxbai_rerank"

    def __init__(self, model, tokenizer, *, instruction: str | None = None, **kw):
        super().__init__(model, tokenizer, **kw)
        self.instruction = instruction
        self.yes_id = single_token_id(tokenizer, "1")
        self.no_id = single_token_id(tokenizer, "0")

    def describe(self) -> dict:
        return {**super().describe(), "judge_tokens": {"yes": self.yes_id, "no": self.no_id},
                "instruction": self.instruction}

    def score_batch(self, pairs):
        import torch

        from presdep.scoring.readout import grade_head_logits

        rows = [self.tokenizer(mxbai_prompt(q, d, self.instruction), add_special_tokens=False)["input_ids"]
                for q, d in pairs]
        if self.max_length:
            rows = [r[-self.max_length:] for r in rows]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad_id(self.tokenizer), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
        last = torch.tensor([len(r) - 1 for r in rows])
        decoder, head = self.model.get_decoder(), self.model.get_output_embeddings()
        with torch.inference_mode():
            # Right padding under causal attention: real tokens never see a pad.
            hidden = decoder(input_ids=ids.to(self.device), use_cache=False).last_hidden_state
            picked = hidden[torch.arange(len(rows), device=hidden.device), last.to(hidden.device)]
            logits = grade_head_logits(self.model, head, picked, [self.yes_id, self.no_id])
        return (logits[:, 0] - logits[:, 1]).tolist()


def _build(cls, auto_class: str, run: ScoringRun, prompt: PromptSettings, **extra):
    spec = run.model_entry()
    model, tok = load_hf(spec, auto_class)
    return cls(model, tok, batch_size=batch_size_of(spec), model_desc=describe_model(spec), **extra)


def make_cross_encoder(run: ScoringRun, prompt: PromptSettings):
    return _build(CrossEncoderScorer, "AutoModelForSequenceClassification", run, prompt)


def make_reward_model(run: ScoringRun, prompt: PromptSettings):
    return _build(RewardModelScorer, "AutoModelForSequenceClassification", run, prompt)


def make_mxbai_rerank(run: ScoringRun, prompt: PromptSettings):
    return _build(MxbaiRerankScorer, "AutoModelForCausalLM", run, prompt)


__all__ = ["PairCache", "PointwiseScorer", "CrossEncoderScorer", "RewardModelScorer", "MxbaiRerankScorer",
           "mxbai_prompt", "make_cross_encoder", "make_reward_model", "make_mxbai_rerank"]
