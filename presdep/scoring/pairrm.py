"""PairRM (llm-blender): a pairwise reward model compared both ways, read as one score per response.

The published model (``llm-blender/PairRM-hf``) is a DeBERTa-v2 encoder with a small
head: the input is ``<|source|>prompt <|candidate1|>A <|candidate2|>B`` (each piece
encoded with its own special tokens), the head scores [source; candidate] at each
prefix token, and the logit is head(A) - head(B) averaged over its tasks (> 0: A wins).
:class:`DebertaV2PairRM` has the published layout, so that checkpoint loads into it.

Score of response i in a prompt = mean over the other responses j of
(logit(i, j) - logit(j, i)) / 2: every ordered pair is compared, so the score does not
depend on the order the responses are shown in (it does depend on which responses
share the prompt; the response protocol's B holds all of a prompt's responses).
Each (prompt, A, B) triple is computed once per run, in sorted order.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2Model, DebertaV2PreTrainedModel

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.runtime.models import describe_model, resolve_device, resolve_dtype
from presdep.scoring.hf_load import batch_size_of, where

SOURCE_PREFIX, CAND1_PREFIX, CAND2_PREFIX = "<|source|>", "<|candidate1|>", "<|candidate2|>"


class DebertaV2PairRM(DebertaV2PreTrainedModel):
    """The PairRM head over a DeBERTa-v2 encoder (the published parameter names)."""

    def __init__(self, config):
        super().__init__(config)
        self.n_tasks = config.n_tasks
        self.pretrained_model = DebertaV2Model(config)
        self.source_prefix_id = config.source_prefix_id
        self.cand1_prefix_id = config.cand1_prefix_id
        self.cand2_prefix_id = config.cand2_prefix_id
        h = config.hidden_size
        self.head_layer = nn.Sequential(nn.Dropout(config.drop_out), nn.Linear(2 * h, h), nn.Tanh(),
                                        nn.Dropout(config.drop_out), nn.Linear(h, self.n_tasks))
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: Any) -> SequenceClassifierOutput:
        for tid, what in ((self.source_prefix_id, "<|source|>"), (self.cand1_prefix_id, "<|candidate1|>"),
                          (self.cand2_prefix_id, "<|candidate2|>")):
            if not bool((input_ids == tid).any(dim=1).all()):
                raise InvalidInput(f"PairRM input lacks the {what} token in some row")
        enc = self.pretrained_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

        def at(tid):
            rows, cols = torch.where(input_ids == tid)
            return enc[rows, cols]

        src = at(self.source_prefix_id)
        left = self.head_layer(torch.cat([src, at(self.cand1_prefix_id)], dim=-1))
        right = self.head_layer(torch.cat([src, at(self.cand2_prefix_id)], dim=-1))
        return SequenceClassifierOutput(logits=(left - right).mean(dim=-1))


def pair_ids(tokenizer: Any, source: str, a: str, b: str, source_max: int = 1224, cand_max: int = 412) -> list[int]:
    """The published input layout and truncation (source first, the candidates share the rest)."""
    total = source_max + 2 * cand_max
    s = tokenizer.encode(SOURCE_PREFIX + source, max_length=source_max, truncation=True)
    c = (total - len(s)) // 2
    return (s + tokenizer.encode(CAND1_PREFIX + a, max_length=c, truncation=True)
            + tokenizer.encode(CAND2_PREFIX + b, max_length=c, truncation=True))


class PairRMScorer(PromptScorer):
    name = "pairrm"
    template_sha256 = None

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int, model_desc: Mapping[str, Any] | None = None):
        if batch_size < 1:
            raise InvalidInput(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.model_desc = dict(model_desc or {"class": type(model).__name__})
        self.cache: dict[tuple[str, str, str], float] = {}

    def describe(self) -> dict:
        return {"scorer": self.name, "model": self.model_desc, "order_invariant": True,
                "aggregation": "mean over the other responses of (logit(i,j) - logit(j,i)) / 2"}

    def _logits(self, triples: list[tuple[str, str, str]]) -> list[float]:
        rows = [pair_ids(self.tokenizer, s, a, b) for s, a, b in triples]
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(rows), width), int(pad), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        dev = next(self.model.parameters()).device
        with torch.inference_mode():
            return self.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits.float().tolist()

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        need = sorted({(q, a, b) for q, docs in prompts for a in docs for b in docs if a != b} - self.cache.keys())
        for i in range(0, len(need), self.batch_size):
            part = need[i : i + self.batch_size]
            self.cache.update(zip(part, self._logits(part)))
        out = []
        for q, docs in prompts:
            row = []
            for a in docs:
                others = [b for b in docs if b != a]
                s = sum(self.cache[(q, a, b)] - self.cache[(q, b, a)] for b in others) / (2 * len(others)) if others else 0.0
                row.append(GradeReadout(float(s), None))
            out.append(row)
        return out


def make_pairrm(run: ScoringRun, prompt: PromptSettings) -> PairRMScorer:
    from transformers import AutoTokenizer

    spec = run.model_entry()
    loc, kw = where(spec)
    dev = resolve_device(spec.get("device") or "auto")
    model = DebertaV2PairRM.from_pretrained(loc, dtype=resolve_dtype(spec.get("dtype") or "auto", dev), **kw)
    tok = AutoTokenizer.from_pretrained(loc, **kw)
    return PairRMScorer(model.to(dev).eval(), tok, batch_size=batch_size_of(spec), model_desc=describe_model(spec))


__all__ = ["DebertaV2PairRM", "PairRMScorer", "pair_ids", "make_pairrm"]
