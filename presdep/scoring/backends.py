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
        instruction: str | None = None,
    ):
        from presdep.scoring.template import SkeletonBuilder, load_template

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        if isinstance(template, str):
            template = load_template(template)
        self.builder = SkeletonBuilder(tokenizer, template, max_doc_chars, chat_template_kwargs, instruction)
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
            "instruction": self.builder.instruction,
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
    opts = _runtime_options(variant, spec)
    model, tok = load_model(spec, **{k: opts[k] for k in ("device", "dtype") if k in opts})
    desc = describe_model(spec)
    if variant.get("adapter"):
        # A trained LoRA student: base model + adapter directory.
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(variant["adapter"])).eval()
        desc = {**desc, "adapter": str(variant["adapter"])}
    return TransformersScorer(
        model, tok,
        max_doc_chars=protocol.get("max_doc_chars"),
        **({"batch_size": int(opts["batch_size"])} if "batch_size" in opts else {}),
        chat_template_kwargs=opts.get("chat_template_kwargs"),
        model_desc=desc,
        template=_template(protocol),
        instruction=protocol.get("instruction"),
    )


def _runtime_options(variant: Mapping[str, Any], spec: Mapping[str, Any]) -> dict:
    """device, dtype, batch_size, ...: the model entry's (where the schema puts them) over
    the same keys given on the variant by a library caller."""
    keys = ("device", "dtype", "batch_size", "logprobs_k", "gpu_memory_utilization", "chat_template_kwargs")
    return {k: src[k] for src in (variant, spec) for k in keys if k in src}


def _template(protocol: Mapping[str, Any]):
    """The dataset's rubric (a shipped name or a user's file); the relevance rubric when unset."""
    from presdep.scoring.template import DEFAULT_TEMPLATE, load_template

    return load_template(protocol.get("rubric") or DEFAULT_TEMPLATE)


class MissingGradeLogprob(RuntimeError):
    """A grade token is absent from the prompt logprobs vLLM returned for a read position."""


def grade_probs_from_logprobs(
    entry: Mapping[int, Any] | None, grade_ids: Sequence[int], *, where: str = "", logprobs_k: int | None = None
) -> tuple[float, ...]:
    """P(grade) from one position's returned logprobs, softmaxed over the grade tokens.

    ``entry`` maps token id -> logprob (a float or an object with ``.logprob``, as vLLM
    returns). Every grade token must be present: a missing one would otherwise be a
    silent probability of 0, and which tokens fall outside the top k depends on the slot.
    """
    import math

    entry = entry or {}
    missing = [g for g, tid in enumerate(grade_ids) if tid not in entry]
    if missing:
        top = f"the top-{logprobs_k} " if logprobs_k else "the "
        raise MissingGradeLogprob(
            f"vllm readout{' at ' + where if where else ''}: grade(s) {missing} (token ids "
            f"{[grade_ids[g] for g in missing]}) absent from {top}prompt logprobs ({len(entry)} tokens returned); "
            "raise the variant's logprobs_k"
        )
    lps = []
    for tid in grade_ids:
        lp = float(getattr(entry[tid], "logprob", entry[tid]))
        if math.isnan(lp) or lp == math.inf:
            raise MissingGradeLogprob(f"vllm readout{' at ' + where if where else ''}: logprob {lp} for token {tid}")
        lps.append(lp)
    top_lp = max(lps)
    if top_lp == -math.inf:
        raise MissingGradeLogprob(f"vllm readout{' at ' + where if where else ''}: every grade token has logprob -inf")
    ex = [math.exp(x - top_lp) for x in lps]
    z = sum(ex)
    return tuple(x / z for x in ex)


class VLLMScorer:
    """GPU backend: the same token sequence, read from vLLM prompt logprobs.

    ``prompt_logprobs[t]`` is the distribution that predicted prompt token t, so
    slot s is read at its dummy grade (read position + 1). vLLM returns the top
    ``logprobs_k`` tokens plus the actual one (the dummy "0"); a grade token
    outside them is an error (:class:`MissingGradeLogprob`, see
    :func:`grade_probs_from_logprobs`), never a probability of 0.
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
        template: Any = None,
        instruction: str | None = None,
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
        self.builder = SkeletonBuilder(tok, template, max_doc_chars, chat_template_kwargs, instruction)
        self.grade_ids = self.builder.grade_ids
        self.template_sha256 = self.builder.template.sha256
        self.logprobs_k = int(logprobs_k)
        self.model_desc = dict(model_desc or {"path": str(model_path)})
        self.slots_read = 0

    def describe(self) -> dict:
        return {"scorer": self.name, "model": self.model_desc, "template": self.builder.template.name,
                "template_sha256": self.template_sha256, "instruction": self.builder.instruction,
                "logprobs_k": self.logprobs_k,
                "grade_token_ids": list(self.grade_ids)}

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        built = [self.builder.build(q, d) for q, d in prompts]
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=self.logprobs_k)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=b.ids) for b in built], params, use_tqdm=False)
        result = []
        for k, (b, out) in enumerate(zip(built, outs)):
            plp = out.prompt_logprobs
            if plp is None or len(plp) != len(b.ids):
                raise RuntimeError(f"vLLM returned {None if plp is None else len(plp)} prompt logprobs for {len(b.ids)} tokens")
            row = []
            for s, r in enumerate(b.read_positions):
                p = grade_probs_from_logprobs(plp[r + 1], self.grade_ids, where=f"prompt {k}, slot {s + 1}",
                                              logprobs_k=self.logprobs_k)
                row.append(GradeReadout(sum(g * pg for g, pg in enumerate(p)), p))
                self.slots_read += 1
            result.append(row)
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
        **{k: v for k, v in _runtime_options(variant, spec).items() if k in ("dtype", "logprobs_k", "gpu_memory_utilization")},
        max_model_len=spec.get("max_model_len"),
        chat_template_kwargs=_runtime_options(variant, spec).get("chat_template_kwargs"),
        model_desc=describe_model(spec),
        revision=revision,
        template=_template(protocol),
        instruction=protocol.get("instruction"),
    )
