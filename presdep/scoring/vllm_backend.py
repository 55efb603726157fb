"""GPU backend: the expected-grade readout with vLLM, LoRA adapters included.

Two readouts (``readout``, a model entry's runtime option; see :mod:`presdep.scoring.vllm_readout`):

- ``pooling`` (default): vLLM's pooling runner with a token classifier cut from the LM head's
  four grade rows; the host gets ``[num_tokens, 4]`` logits per prompt and keeps B rows.
- ``logprobs``: top-``logprobs_k`` prompt logprobs at every position; a slot whose grades are
  not all among them gets an exact second read (full-vocabulary logprobs at its read position).

A variant's ``adapter`` (a PEFT LoRA directory) is applied through vLLM's LoRA request API
(``LLM(enable_lora=True)`` + ``LoRARequest`` on every ``encode`` / ``generate``), in both
readouts, so a trained row scored with vLLM is the trained model, never silently the base model.

The engine starts on the first read that misses the read cache: a job whose prompts were
all read before never starts it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.runtime.hashing import weights_sha256
from presdep.runtime.models import describe_model, model_identity
from presdep.scoring.backends import _runtime_options, _template
from presdep.scoring.read_cache import Stopwatch, entry_key
from presdep.scoring.read_through import Prepared, readouts_of, request_readouts, token_batches
from presdep.scoring.template import SkeletonBuilder
from presdep.scoring.vllm_readout import (
    CHUNK_PROMPTS,
    DEFAULT_READOUT,
    READOUT_OPTION,
    MissingGradeLogprob,
    ReadStats,
    check_readout,
    classifier_tokens,
    grade_probs_from_logprobs,
    logprob_reads,
    pooling_overrides,
    pooling_refusal,
    token_logits_probs,
)


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


class VLLMScorer(PromptScorer):
    """GPU backend: the same token sequence as the transformers reference, read by vLLM.

    It takes part in the run's read cache natively (:meth:`cache_identity`, :meth:`prepare`,
    :meth:`read_prepared`, :meth:`plan_batches`); :meth:`score_prompts` serves callers without one.
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        *,
        readout: str = DEFAULT_READOUT,
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
        model_identity: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
        chunk_prompts: int = CHUNK_PROMPTS,
    ):
        try:
            import vllm
        except ImportError as exc:
            raise ImportError("the vllm scorer needs the GPU extra: pip install 'presdep[gpu]'") from exc
        from transformers import AutoConfig, AutoTokenizer

        self.readout = check_readout(readout)
        self.vllm_version = str(getattr(vllm, "__version__", "unknown"))
        self.dtype_name = "bfloat16" if dtype == "auto" else str(dtype)
        self.model_path, self.revision = str(model_path), revision
        # The tokenizer from the files vLLM loads its own from: prompts are built (and their
        # cache keys known) before, or without, the engine.
        tok = AutoTokenizer.from_pretrained(self.model_path, revision=revision)
        self.builder = SkeletonBuilder(tok, template, max_doc_chars, chat_template_kwargs, instruction)
        self.grade_ids = self.builder.grade_ids
        self.template_sha256 = self.builder.template.sha256
        self.logprobs_k = int(logprobs_k)
        self.model_desc = dict(model_desc or {"path": self.model_path})
        self.model_identity = model_identity
        self.chunk_prompts = int(chunk_prompts)
        kw: dict[str, Any] = {"dtype": self.dtype_name, "gpu_memory_utilization": gpu_memory_utilization}
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        if revision:
            kw["revision"] = revision
        self.lora_request = None
        if adapter:
            from vllm.lora.request import LoRARequest

            kw.update(enable_lora=True, max_lora_rank=vllm_max_lora_rank(adapter_rank(adapter)), max_loras=1)
            self.lora_request = LoRARequest("presdep-adapter", 1, str(adapter))
        if self.readout == "pooling":
            cfg = AutoConfig.from_pretrained(self.model_path, revision=revision)
            text = cfg.get_text_config()
            why = pooling_refusal(getattr(cfg, "architectures", None), getattr(text, "final_logit_softcapping", None),
                                  self.vllm_version, adapter, getattr(text, "logits_scaling", None))
            if why:
                raise InvalidInput(f"vllm readout pooling: {why}; {READOUT_OPTION}")
            kw.update(runner="pooling", hf_overrides=pooling_overrides(cfg.architectures,
                                                                      classifier_tokens(tok, self.grade_ids)))
        else:
            kw["max_logprobs"] = -1  # no cap: a second read asks for the whole vocabulary (logprobs=-1)
        self._engine_kw = kw
        self._llm: Any = None
        self.load = Stopwatch()  # engine start-up, on the first cache miss
        self.forward = Stopwatch()  # engine calls and the host step that turns their output into P(grade)
        self.prompts_asked = 0
        self.prompts_read = 0
        self.tokens_read = 0
        self._distinct: set[str] = set()
        self.stats = ReadStats()
        self.on_progress: Callable[[int, int], None] | None = None

    @property
    def llm(self) -> Any:
        if self._llm is None:
            from vllm import LLM

            kw = dict(self._engine_kw)
            if self.readout == "pooling":
                from vllm.config import PoolerConfig

                # One pooling task per engine since vLLM 0.21: the token-wise one.
                kw["pooler_config"] = PoolerConfig(task="token_classify")
            with self.load:
                self._llm = LLM(model=self.model_path, **kw)
        return self._llm

    @property
    def model_loaded(self) -> bool:
        return self._llm is not None

    @property
    def distinct_prompts(self) -> int:
        return len(self._distinct)

    @property
    def second_reads(self) -> int:
        return self.stats.total["second_reads"]

    def describe(self) -> dict:
        out = {"scorer": self.name, "model": self.model_desc, "template": self.builder.template.name,
               "template_sha256": self.template_sha256, "instruction": self.builder.instruction,
               "dtype": self.dtype_name, "readout": self.readout, "grade_token_ids": list(self.grade_ids)}
        if self.readout == "pooling":
            out["classifier"] = "LM-head rows of the grade tokens (token_classify, raw logits)"
        else:
            out.update(logprobs_k=self.logprobs_k,
                       missing_grade="second read: full-vocabulary logprobs at the read position")
        return out

    def cache_identity(self) -> dict:
        """Everything a stored read depends on besides its token ids and read positions."""
        import torch

        ident = self.model_identity() if callable(self.model_identity) else self.model_identity
        if ident is None:
            raise InvalidInput("a read cache needs the scorer's model_identity (the pinned source or weights hash); "
                               "make_vllm sets it, a hand-built VLLMScorer must pass it")
        return {"backend": "vllm", "model": dict(ident), "adapter_sha256": self.model_desc.get("adapter_sha256"),
                "template_sha256": self.template_sha256, "dtype": self.dtype_name, "device_type": "cuda",
                "readout": self.readout, "grade_token_ids": list(self.grade_ids), "vllm": self.vllm_version,
                "torch": torch.__version__}

    def prepare(self, prompts: Sequence[Any]) -> list[Prepared]:
        """Ordinary ``(query, docs)`` prompts or slot requests (:class:`~presdep.contracts.readouts.SlotRequest`)."""
        out = []
        for prompt in prompts:
            b = self.builder.build_request(prompt)
            if b.grade_ids is not None and self.readout == "pooling":
                raise InvalidInput("the pooling readout's head holds the grade tokens 0-3 only; read a render "
                                   "scale's grades with readout: logprobs")
            out.append(Prepared(entry_key(b.ids, b.read_positions, b.grade_ids), len(b.ids), b))
        self.prompts_asked += len(out)
        self._distinct.update(p.key for p in out)
        return out

    def plan_batches(self, items: Sequence[Prepared]) -> list[list[int]]:
        """Chunks of up to ``chunk_prompts`` prompts, longest first: vLLM batches within a chunk."""
        return token_batches([p.tokens for p in items], self.chunk_prompts)

    def read_prepared(self, items: Sequence[Prepared]) -> list[np.ndarray]:
        """P(grade) per slot, float64 ``[slots, 4]``, of each prepared prompt."""
        if not items:
            return []
        built = [p.item for p in items]
        llm = self.llm  # starts the engine on the first miss, outside the forward stopwatch
        with self.forward:
            out = self._read_pooling(llm, built) if self.readout == "pooling" else self._read_logprobs(llm, built)
        tokens = sum(len(b.ids) for b in built)
        self.prompts_read += len(built)
        self.tokens_read += tokens
        if self.on_progress is not None:
            self.on_progress(len(built), tokens)
        return out

    def _read_pooling(self, llm: Any, built: Sequence[Any]) -> list[np.ndarray]:
        from vllm import PoolingParams
        from vllm.inputs import TokensPrompt

        outs = llm.encode([TokensPrompt(prompt_token_ids=b.ids) for b in built], PoolingParams(use_activation=False),
                          use_tqdm=False, lora_request=self.lora_request, pooling_task="token_classify")
        return [token_logits_probs(o.outputs.data, len(b.ids), b.read_positions, where=f"prompt {k}")
                for k, (b, o) in enumerate(zip(built, outs, strict=True))]

    def _read_logprobs(self, llm: Any, built: Sequence[Any]) -> list[np.ndarray]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        def generate(ids: Sequence[list[int]], params: Any) -> list:
            return llm.generate([TokensPrompt(prompt_token_ids=x) for x in ids], params, use_tqdm=False,
                                lora_request=self.lora_request)

        def second(prefixes: list[list[int]]) -> list:
            # One generated token per prefix: its logprobs over the whole vocabulary are the
            # distribution at the slot's read position.
            full = SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1, detokenize=False)
            return [o.outputs[0].logprobs[0] for o in generate(prefixes, full)]

        first = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=self.logprobs_k, detokenize=False)
        outs = generate([b.ids for b in built], first)
        probs: list = [None] * len(built)
        groups: dict[tuple[int, ...], list[int]] = {}  # a render's scale reads its own grade tokens
        for i, b in enumerate(built):
            groups.setdefault(tuple(b.grade_ids or self.grade_ids), []).append(i)
        for grade_ids, idx in groups.items():
            part, made = logprob_reads([built[i] for i in idx], [outs[i].prompt_logprobs for i in idx], grade_ids,
                                       second, self.logprobs_k)
            self.stats.add(made)
            for i, p in zip(idx, part, strict=True):
                probs[i] = p
        return probs

    def take_stats(self) -> dict:
        """Second reads since the last call (the scoring loop stores them per query)."""
        return self.stats.take() if self.readout == "logprobs" else {}

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        return [readouts_of(p) for p in self.read_prepared(self.prepare(prompts))]

    def score_slots(self, requests: Sequence[Any]) -> list[list[GradeReadout]]:
        """One readout per line each slot request reads (capability ``slot_reads``), on its render's scale."""
        return request_readouts(requests, self.read_prepared(self.prepare(requests)), self.builder.template)


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
        desc = {**desc, "adapter": str(adapter), "adapter_sha256": weights_sha256(adapter)}
    opts = _runtime_options(run, spec)
    return VLLMScorer(
        path,
        adapter=str(adapter) if adapter else None,
        max_doc_chars=prompt.max_doc_chars,
        **{k: v for k, v in opts.items() if k in ("dtype", "logprobs_k", "gpu_memory_utilization", "readout")},
        max_model_len=spec.get("max_model_len"),
        chat_template_kwargs=opts.get("chat_template_kwargs"),
        model_desc=desc,
        revision=revision,
        template=_template(prompt),
        instruction=prompt.instruction,
        model_identity=lambda: model_identity(spec),
    )


__all__ = ["MissingGradeLogprob", "VLLMScorer", "adapter_rank", "grade_probs_from_logprobs", "make_vllm",
           "vllm_max_lora_rank"]
