"""Scorer backends: identity (first-stage order), transformers (reference), vLLM (GPU).

The factories ``make_<name>(variant, protocol)`` are what the registry in
:mod:`presdep.scoring` calls.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from presdep.scoring import GradeReadout

log = logging.getLogger(__name__)


class IdentityScorer:
    """Keeps the first-stage order: score = n_candidates - first_stage_rank.

    It reads ranks, not texts, so it is the same under every presentation (a
    reference row: zero instability, first-stage quality). ``score_dataset``
    recognises it by ``first_stage = True`` and calls :meth:`score_ranked`.
    """

    name = "identity"
    first_stage = True
    template_sha256 = None

    def describe(self) -> dict:
        return {"scorer": self.name}

    def score_ranked(self, ranks: Sequence[int], n_candidates: int) -> list[GradeReadout]:
        return [GradeReadout(float(n_candidates - int(r)), None) for r in ranks]

    def score(self, query: str, docs: Sequence[str]) -> list[GradeReadout]:
        raise TypeError(
            "the identity scorer scores first-stage ranks, not texts; "
            "call score_ranked(ranks, n_candidates) (score_dataset does this)"
        )

    def score_prompts(self, prompts):
        raise TypeError("the identity scorer scores first-stage ranks; use score_ranked")


def make_identity(variant: Mapping[str, Any], protocol: Mapping[str, Any]) -> IdentityScorer:
    return IdentityScorer()


def _pad_id(tokenizer: Any) -> int:
    for attr in ("pad_token_id", "eos_token_id"):
        v = getattr(tokenizer, attr, None)
        if v is not None:
            return int(v)
    return 0


class TransformersScorer:
    """Reference backend: the one-pass readout with a Hugging Face causal LM.

    Prompts are sorted by length and batched (right padding); results come back
    in input order, one readout per document in slot order.
    """

    name = "transformers"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_doc_chars: int | None = None,
        batch_size: int = 8,
        template: Any = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        model_desc: Mapping[str, Any] | None = None,
        progress: bool = False,
    ):
        from presdep.scoring.template import SkeletonBuilder

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.builder = SkeletonBuilder(tokenizer, template, max_doc_chars, chat_template_kwargs)
        self.grade_ids = self.builder.grade_ids
        self.template_sha256 = self.builder.template.sha256
        self.batch_size = int(batch_size)
        self.pad_id = _pad_id(tokenizer)
        self.model_desc = dict(model_desc or {"class": type(model).__name__})
        self.progress = progress

    @property
    def device(self):
        return next(self.model.parameters()).device

    def describe(self) -> dict:
        return {
            "scorer": self.name,
            "model": self.model_desc,
            "template": self.builder.template.name,
            "template_sha256": self.template_sha256,
            "dtype": str(next(self.model.parameters()).dtype),
            "device_type": self.device.type,
            "grade_token_ids": list(self.grade_ids),
        }

    def build(self, query: str, docs: Sequence[str]):
        return self.builder.build(query, docs)

    def slot_probs(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list:
        """P(grade) per slot for each prompt: a list of float64 arrays [n_docs, 4]."""
        import torch
        from tqdm.auto import tqdm

        from presdep.scoring.readout import grade_probs, pad_batch, slot_grade_logits

        built = [self.build(q, d) for q, d in prompts]
        order = sorted(range(len(built)), key=lambda i: -len(built[i].ids))  # similar lengths together
        out: list = [None] * len(built)
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        with torch.inference_mode():
            for idx in tqdm(batches, desc="readout", unit="batch", disable=not self.progress, leave=False):
                ids, _, reads, _ = pad_batch([built[i] for i in idx], self.pad_id, self.device)
                # Right padding + causal attention: no mask needed (see slot_grade_logits).
                probs = grade_probs(slot_grade_logits(self.model, ids, None, reads, self.grade_ids)).cpu().numpy()
                for row, i in enumerate(idx):
                    out[i] = probs[row, : len(built[i].read_positions)]
        return out

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        import numpy as np

        grades = np.arange(4, dtype=np.float64)
        result = []
        for p in self.slot_probs(prompts):
            result.append([GradeReadout(float(row @ grades), tuple(float(x) for x in row)) for row in p])
        return result

    def score(self, query: str, docs: Sequence[str]) -> list[GradeReadout]:
        return self.score_prompts([(query, docs)])[0]


def _model_spec(variant: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = variant.get("model")
    if spec is None:
        raise ValueError(f"variant {variant.get('name', '')!r} with scorer {variant.get('scorer')!r} needs a 'model'")
    if isinstance(spec, str):
        spec = {"source": "local", "path": spec}
    return spec


def make_transformers(variant: Mapping[str, Any], protocol: Mapping[str, Any]) -> TransformersScorer:
    from presdep.models import describe_model, load_model

    spec = _model_spec(variant)
    model, tok = load_model(spec, device=variant.get("device", "auto"), dtype=variant.get("dtype", "auto"))
    desc = describe_model(spec)
    if variant.get("adapter"):
        # A trained LoRA student: base model + adapter directory.
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(variant["adapter"])).eval()
        desc = {**desc, "adapter": str(variant["adapter"])}
    return TransformersScorer(
        model, tok,
        max_doc_chars=protocol.get("max_doc_chars"),
        batch_size=int(variant.get("batch_size", 8)),
        chat_template_kwargs=variant.get("chat_template_kwargs"),
        model_desc=desc,
    )


class VLLMScorer:
    """GPU backend: the same token sequence, read from vLLM prompt logprobs.

    ``prompt_logprobs[t]`` is the distribution that predicted prompt token t, so
    slot s is read at its dummy grade (read position + 1). vLLM returns the top
    ``logprobs_k`` tokens plus the actual one (the dummy "0"); a grade outside
    them gets probability 0, and such misses are counted in
    ``missing_grade_tokens`` and logged.
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        *,
        max_doc_chars: int | None = None,
        dtype: str = "auto",
        logprobs_k: int = 20,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        model_desc: Mapping[str, Any] | None = None,
        revision: str | None = None,
    ):
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError("the vllm scorer needs the GPU extra: pip install 'presdep[gpu]'") from exc
        from presdep.scoring.template import SkeletonBuilder

        kw: dict[str, Any] = {"dtype": "bfloat16" if dtype == "auto" else dtype,
                              "gpu_memory_utilization": gpu_memory_utilization,
                              "max_logprobs": max(logprobs_k, 20)}
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        if revision:
            kw["revision"] = revision
        self.llm = LLM(model=str(model_path), **kw)
        tok = self.llm.get_tokenizer()
        self.builder = SkeletonBuilder(tok, None, max_doc_chars, chat_template_kwargs)
        self.grade_ids = self.builder.grade_ids
        self.template_sha256 = self.builder.template.sha256
        self.logprobs_k = int(logprobs_k)
        self.model_desc = dict(model_desc or {"path": str(model_path)})
        self.missing_grade_tokens = 0
        self.slots_read = 0

    def describe(self) -> dict:
        return {"scorer": self.name, "model": self.model_desc, "template": self.builder.template.name,
                "template_sha256": self.template_sha256, "logprobs_k": self.logprobs_k,
                "grade_token_ids": list(self.grade_ids)}

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        import math

        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        built = [self.builder.build(q, d) for q, d in prompts]
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=self.logprobs_k)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=b.ids) for b in built], params, use_tqdm=False)
        result = []
        missing_before = self.missing_grade_tokens
        for b, out in zip(built, outs):
            plp = out.prompt_logprobs
            if plp is None or len(plp) != len(b.ids):
                raise RuntimeError(f"vLLM returned {None if plp is None else len(plp)} prompt logprobs for {len(b.ids)} tokens")
            row = []
            for r in b.read_positions:
                entry = plp[r + 1] or {}
                lps = []
                for g in self.grade_ids:
                    lp = entry.get(g)
                    if lp is None:
                        self.missing_grade_tokens += 1
                        lps.append(-math.inf)
                    else:
                        lps.append(float(getattr(lp, "logprob", lp)))
                top = max(lps)
                ex = [math.exp(x - top) for x in lps]
                z = sum(ex)
                p = tuple(x / z for x in ex)
                row.append(GradeReadout(sum(g * pg for g, pg in enumerate(p)), p))
                self.slots_read += 1
            result.append(row)
        if self.missing_grade_tokens > missing_before:
            log.warning("vllm: %d grade tokens outside the top-%d prompt logprobs so far (of %d slots x 4)",
                        self.missing_grade_tokens, self.logprobs_k, self.slots_read)
        return result

    def score(self, query: str, docs: Sequence[str]) -> list[GradeReadout]:
        return self.score_prompts([(query, docs)])[0]


def make_vllm(variant: Mapping[str, Any], protocol: Mapping[str, Any]) -> VLLMScorer:
    from presdep.models import describe_model

    spec = _model_spec(variant)
    if spec.get("path"):
        path, revision = spec["path"], None
    elif spec.get("source") == "hf":
        path, revision = spec["id"], spec.get("revision")
    else:
        raise ValueError(f"vllm scorer needs a fetched model directory ('path') or an hf id: {dict(spec)}")
    return VLLMScorer(
        path,
        max_doc_chars=protocol.get("max_doc_chars"),
        dtype=variant.get("dtype", "auto"),
        logprobs_k=int(variant.get("logprobs_k", 20)),
        gpu_memory_utilization=float(variant.get("gpu_memory_utilization", 0.85)),
        max_model_len=variant.get("max_model_len"),
        chat_template_kwargs=variant.get("chat_template_kwargs"),
        model_desc=describe_model(spec),
        revision=revision,
    )
