"""GPU backend: the expected-grade readout from vLLM prompt logprobs, LoRA adapters included.

A variant's ``adapter`` (a PEFT LoRA directory) is applied through vLLM's LoRA
request API (``LLM(enable_lora=True)`` + ``LoRARequest`` on every ``generate``), so a
trained row scored with vLLM is the trained model, never silently the base model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput, PresdepError
from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.runtime.models import describe_model
from presdep.scoring.backends import _runtime_options, _template
from presdep.scoring.template import SkeletonBuilder


def adapter_rank(adapter: str | Path) -> int:
    """The LoRA rank ``r`` of a PEFT adapter directory (vLLM must be told the largest rank)."""
    cfg = Path(adapter) / "adapter_config.json"
    try:
        r = json.loads(cfg.read_text())["r"]
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"adapter {adapter}: no adapter_config.json (expected a PEFT LoRA directory)") from exc
    except (KeyError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{cfg}: expected a JSON object with the LoRA rank 'r'") from exc
    if not isinstance(r, int) or r < 1:
        raise InvalidInput(f"{cfg}: LoRA rank 'r' must be a positive integer, got {r!r}")
    pattern = json.loads(cfg.read_text()).get("rank_pattern") or {}
    return max([r, *(int(x) for x in pattern.values())])


# The ranks vLLM's LoRAConfig accepts for max_lora_rank (vllm.config.lora.MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts that holds an adapter of ``rank``."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise InvalidInput(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}")


class MissingGradeLogprob(PresdepError, RuntimeError):
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


class VLLMScorer(PromptScorer):
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
        adapter: str | None = None,
    ):
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError("the vllm scorer needs the GPU extra: pip install 'presdep[gpu]'") from exc
        kw: dict[str, Any] = {"dtype": "bfloat16" if dtype == "auto" else dtype,
                              "gpu_memory_utilization": gpu_memory_utilization,
                              "max_logprobs": max(logprobs_k, 20)}
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        if revision:
            kw["revision"] = revision
        self.lora_request = None
        if adapter:
            from vllm.lora.request import LoRARequest

            kw.update(enable_lora=True, max_lora_rank=vllm_max_lora_rank(adapter_rank(adapter)), max_loras=1)
            self.lora_request = LoRARequest("presdep-adapter", 1, str(adapter))
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
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=b.ids) for b in built], params, use_tqdm=False,
                                 lora_request=self.lora_request)
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


def make_vllm(run: ScoringRun, prompt: PromptSettings) -> VLLMScorer:
    spec = run.model_entry()
    if spec.get("path"):
        path, revision = spec["path"], None
    elif spec.get("source") == "hf":
        path, revision = spec["id"], spec.get("revision")
    else:
        raise InvalidInput(f"vllm scorer needs a fetched model directory ('path') or an hf id: {dict(spec)}")
    adapter = run.adapter
    desc = describe_model(spec)
    if adapter:
        desc = {**desc, "adapter": str(adapter)}
    return VLLMScorer(
        path,
        adapter=str(adapter) if adapter else None,
        max_doc_chars=prompt.max_doc_chars,
        **{k: v for k, v in _runtime_options(run, spec).items() if k in ("dtype", "logprobs_k", "gpu_memory_utilization")},
        max_model_len=spec.get("max_model_len"),
        chat_template_kwargs=_runtime_options(run, spec).get("chat_template_kwargs"),
        model_desc=desc,
        revision=revision,
        template=_template(prompt),
        instruction=prompt.instruction,
    )
