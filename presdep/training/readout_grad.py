"""A differentiable expected-grade readout for training (and a no-grad scorer on top).

Builds on the scorer's prompt and skeleton builder
(:class:`presdep.scoring.template.SkeletonBuilder`): the token ids and read
positions are exactly those of the evaluation readout. One forward pass over
prompt + skeleton; at each read position the next-token logits restricted to the
four grade tokens are softmaxed into P(g) and E[g] = sum g P(g) in [0, 3].

The forward pass is the scoring package's differentiable
``slot_grade_logits`` (decoder hidden states at the read positions through the LM
head, four grade logits kept; right-padded batches), so teacher, student and
evaluation read exactly the same numbers; this module adds E[g] with gradients
and a batched no-grad scorer (whose batches are halved when they run out of GPU memory,
as the transformers scorer's are).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.scoring.backends import read_halving
from presdep.scoring.readout import pad_batch, slot_grade_logits
from presdep.scoring.template import PromptIds, SkeletonBuilder

GRADE_VALUES = (0.0, 1.0, 2.0, 3.0)


def _causal_lm(model: Any) -> Any:
    """The transformers CausalLM inside a (possibly peft-wrapped) model."""
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model


class GradReadout:
    """``expected_grades(prompts)`` -> one tensor of E[g] per prompt, with gradients."""

    def __init__(self, model: Any, tokenizer: Any, *, max_doc_chars: int | None = None, template=None):
        self.model = model
        self.builder = SkeletonBuilder(tokenizer, template=template, max_doc_chars=max_doc_chars)
        self.grade_ids = list(self.builder.grade_ids)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (tokenizer.eos_token_id or 0))

    @property
    def template_sha256(self) -> str:
        return self.builder.template.sha256

    def build(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[PromptIds]:
        return [self.builder.build(q, list(d)) for q, d in prompts]

    def grade_logits(self, built: Sequence[PromptIds], *, masked: bool = True) -> list[torch.Tensor]:
        """Per prompt, a (n_docs, 4) float32 tensor of grade-token logits at the read positions.

        The scoring readout's own differentiable :func:`presdep.scoring.readout.slot_grade_logits`
        on a right-padded batch (:func:`presdep.scoring.readout.pad_batch`). ``masked`` False
        drops the padding mask: exact for right padding (real tokens never attend to a pad, and
        only real rows are read), and SDPA keeps its causal fast path.
        """
        lm = _causal_lm(self.model)
        device = next(self.model.parameters()).device
        ids, mask, reads, _ = pad_batch(list(built), self.pad_id, device)
        logits = slot_grade_logits(lm, ids, mask if masked else None, reads, self.grade_ids)
        return [logits[i, : len(p.read_positions)].float() for i, p in enumerate(built)]

    def expected_grades(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[torch.Tensor]:
        """E[g] per document of each prompt (prompt order = slot order), differentiable."""
        return self.expected_from_built(self.build(prompts))

    def expected_from_built(self, built: Sequence[PromptIds], *, masked: bool = True) -> list[torch.Tensor]:
        outs = []
        for logits in self.grade_logits(built, masked=masked):
            p = torch.softmax(logits, dim=-1)
            g = torch.tensor(GRADE_VALUES, dtype=p.dtype, device=p.device)
            outs.append(p @ g)
        return outs

    def probabilities(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[torch.Tensor]:
        return [torch.softmax(x, dim=-1) for x in self.grade_logits(self.build(prompts))]


class ReadoutScorer(PromptScorer):
    """A no-grad scorer (the :class:`presdep.scoring.Scorer` interface) over :class:`GradReadout`.

    Used for the open-weight teacher and the held-out evaluation during training
    when the scoring package's own transformers scorer is not available.
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "readout", max_doc_chars: int | None = None,
                 batch_prompts: int = 8, masked: bool = True):
        self.name = name
        self.readout = GradReadout(model, tokenizer, max_doc_chars=max_doc_chars)
        self.batch_prompts = int(batch_prompts)
        self.masked = bool(masked)
        self.template_sha256 = self.readout.template_sha256
        # After a batch ran out of GPU memory: the most prompts one forward reads.
        self.oom_cap: int | None = None

    def describe(self) -> dict:
        return {"scorer": self.name, "template_sha256": self.template_sha256}

    @torch.inference_mode()
    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        """Read as the scorer does: prompts sorted by length (little padding), results in input order."""
        was_training = self.readout.model.training
        self.readout.model.eval()
        built = self.readout.build(prompts)
        order = sorted(range(len(built)), key=lambda i: (len(built[i].ids), i))
        out: list[list[GradeReadout] | None] = [None] * len(built)

        def read(part: list[int]) -> None:
            for i, logits in zip(part, self.readout.grade_logits([built[i] for i in part], masked=self.masked)):
                p = torch.softmax(logits.double(), dim=-1).cpu()
                e = (p @ torch.tensor(GRADE_VALUES, dtype=torch.float64)).tolist()
                out[i] = [GradeReadout(float(s), tuple(float(x) for x in row)) for s, row in zip(e, p.tolist())]

        try:
            for start in range(0, len(order), self.batch_prompts):
                self.oom_cap, _ = read_halving(order[start : start + self.batch_prompts], read, cap=self.oom_cap,
                                               tokens=lambda i: len(built[i].ids), where=f"{self.name} scorer")
        finally:
            if was_training:
                self.readout.model.train()
        return out  # type: ignore[return-value]


__all__ = ["GradReadout", "ReadoutScorer", "GRADE_VALUES"]
