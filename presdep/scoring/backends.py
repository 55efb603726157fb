"""Scorer backends: identity (first-stage order), transformers (reference); vLLM lives in
:mod:`presdep.scoring.vllm_backend`.

The factories ``make_<name>(variant, protocol)`` are what the registry in
:mod:`presdep.scoring` calls. A batch that runs out of GPU memory is halved and its halves
read in turn (:func:`read_halving`).
"""

from __future__ import annotations

import gc
import logging
from typing import Any, Callable, Mapping, Sequence

from presdep.config.records import PromptSettings, ScoringRun, thaw
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import GradeReadout, PromptScorer, SlotRequest
from presdep.runtime.hashing import weights_sha256
from presdep.runtime.models import (
    describe_model,
    load_causal_lm,
    load_prompt_tokenizer,
    model_identity,
    resolve_device_type,
    resolve_dtype_name,
)
from presdep.scoring.hf_load import pad_id
from presdep.scoring.lazy_model import LazyModel
from presdep.scoring.merged_adapter import load_student, merges
from presdep.scoring.read_cache import Stopwatch, entry_key
from presdep.scoring.read_through import Prepared, readouts_of, request_readouts, token_batches
from presdep.scoring.template import DEFAULT_TEMPLATE, SkeletonBuilder, load_template

log = logging.getLogger(__name__)


def read_halving(batch: Sequence[int], read: Callable[[list[int]], None], *, cap: int | None,
                 tokens: Callable[[int], int], where: str) -> tuple[int | None, int]:
    """Read ``batch`` (prompt indices, in reading order) with ``read``, in parts of at most ``cap``
    prompts (None: the whole batch); a part that runs out of GPU memory is halved and its halves
    read in turn. Returns the cap in force after (each halving lowers it: the rest of the job
    reads at the size that fitted) and the number of halvings.

    A prompt's readout does not depend on the others in its batch (right padding, causal
    attention), so the result is an uninterrupted read's at the smaller size. Only torch's
    out-of-memory error is caught; a prompt that runs out alone re-raises it, naming its tokens.
    """
    import torch

    oom = torch.cuda.OutOfMemoryError  # torch.OutOfMemoryError: the same class, on CPU builds too
    size = max(1, cap or len(batch))
    pending = [list(batch[k : k + size]) for k in range(0, len(batch), size)][::-1]  # a stack: next part last
    halvings = 0
    while pending:
        part = pending.pop()
        try:
            read(part)
            continue
        except oom as exc:
            if len(part) == 1:
                raise oom(f"{where}: out of GPU memory reading one prompt of {tokens(part[0])} tokens alone; "
                          f"shorten the prompts (max_doc_chars, B) or use a larger GPU") from exc
        # Outside the except, so the failed read's tensors are gone (its traceback held them).
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        half = (len(part) + 1) // 2
        log.warning("%s: out of GPU memory reading %d prompts (%d padded tokens); batch halved to %d prompts, "
                    "kept for the rest of the job", where, len(part), len(part) * max(tokens(i) for i in part), half)
        cap = half if cap is None else min(cap, half)
        halvings += 1
        pending += [part[half:], part[:half]]
    return cap, halvings


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


def make_identity(run: ScoringRun, prompt: PromptSettings) -> IdentityScorer:
    return IdentityScorer()


class TransformersScorer(LazyModel, PromptScorer):
    """Reference backend: the one-pass readout with a Hugging Face causal LM.

    Prompts are sorted by length and batched (right padding); results come back
    in input order, one readout per document in slot order. It offers the read
    interface of :mod:`presdep.scoring.read_through` (``prepare``, ``plan_batches``,
    ``read_prepared``, ``cache_identity``), so the run's read cache sends it only prompts
    whose token ids were never read under its identity; the counters say how many were.

    ``model`` may be None with a ``model_loader`` (and the ``device`` and ``dtype`` it
    will use): the weights are then loaded on the first cache miss, so a job whose
    prompts were all read before never loads them.
    """

    name = "transformers"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_doc_chars: int | None = None,
        batch_size: int = 8,
        batch_tokens: int | None = None,
        template: Any = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        model_desc: Mapping[str, Any] | None = None,
        progress: bool = False,
        instruction: str | None = None,
        model_identity: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
        dtype_reason: str | None = None,
        model_loader: Callable[[], Any] | None = None,
        device: Any = None,
        dtype: Any = None,
    ):
        if batch_size < 1:
            raise InvalidInput(f"batch_size must be >= 1, got {batch_size}")
        if (model is None) == (model_loader is None):
            raise InvalidInput("give exactly one of model and model_loader")
        if model is None and (device is None or dtype is None):
            raise InvalidInput("a model_loader needs the device and dtype the model will have")
        self._model, self._model_loader = model, model_loader
        self._device, self._dtype = device, dtype
        self.tokenizer = tokenizer
        if isinstance(template, str):
            template = load_template(template)
        self.builder = SkeletonBuilder(tokenizer, template, max_doc_chars, chat_template_kwargs, instruction)
        self.grade_ids = self.builder.grade_ids
        self.template_sha256 = self.builder.template.sha256
        self.batch_size = int(batch_size)
        if batch_tokens is not None and int(batch_tokens) < 1:
            raise InvalidInput(f"batch_tokens must be >= 1, got {batch_tokens}")
        self.batch_tokens = int(batch_tokens) if batch_tokens is not None else None
        self.pad_id = pad_id(tokenizer)
        self.model_desc = dict(model_desc or {"class": type(model).__name__ if model is not None else "?"})
        self.load = Stopwatch()  # seconds spent loading weights (0 when every read was cached)
        # A mapping, or a function giving one (hashing weights only when a cache asks).
        self.model_identity = model_identity
        self.dtype_reason = dtype_reason
        self.progress = progress
        # What the profile reports: prompts asked for (and how many distinct ones), prompts and
        # tokens the model read, and time in forward passes.
        self.prompts_asked = 0
        self.prompts_read = 0
        self.tokens_read = 0
        self._distinct: set[str] = set()
        self.forward = Stopwatch()
        # After a batch ran out of GPU memory: the most prompts one forward reads, and how often it ran out.
        self.oom_cap: int | None = None
        self.oom_halvings = 0
        # Called as on_progress(prompts, tokens) per batch read and per prompt answered without
        # a read (a cache hit, a repeat, another job's read); score_dataset sets it for its bar.
        self.on_progress: Callable[[int, int], None] | None = None

    def describe(self) -> dict:
        return self.readout_description()

    def cache_identity(self) -> dict:
        """Everything a stored read depends on besides its token ids (the read cache's folder).
        The library versions come from the package metadata: a job answered from the cache
        imports neither."""
        from importlib.metadata import version

        ident = self.model_identity() if callable(self.model_identity) else self.model_identity
        if ident is None:
            raise InvalidInput("a read cache needs the scorer's model_identity (the pinned source or weights hash); "
                             "make_transformers sets it, a hand-built TransformersScorer must pass it")
        merged = {"adapter_read": self.model_desc["adapter_read"]} if "adapter_read" in self.model_desc else {}
        return {
            "model": dict(ident),
            "adapter_sha256": self.model_desc.get("adapter_sha256"),
            **merged,  # a merged and an unmerged read differ in the last bits
            "template_sha256": self.template_sha256,
            "dtype": self.dtype_name,
            "device_type": self.device_type,
            "grade_token_ids": list(self.grade_ids),
            "torch": version("torch"),
            "transformers": version("transformers"),
        }

    def build(self, query: str, docs: Sequence[str]):
        return self.builder.build(query, docs)

    @property
    def distinct_prompts(self) -> int:
        """Distinct prompts (token ids and read positions) asked for through :meth:`slot_probs`."""
        return len(self._distinct)

    def _progress(self, prompts: int, tokens: int = 0) -> None:
        if self.on_progress is not None and (prompts or tokens):
            self.on_progress(prompts, tokens)

    def read_built(self, built: Sequence[Any]) -> list:
        """The model's P(grade) per slot for built prompts: float64 arrays [n_slots, 4]."""
        import torch
        from tqdm.auto import tqdm

        from presdep.scoring.readout import grade_probs, pad_batch, slot_grade_logits

        model = self.model  # loads the weights on the first miss, outside the forward stopwatch
        out: list = [None] * len(built)

        def read(idx: list[int]) -> None:
            with torch.inference_mode(), self.forward:
                ids, _, reads, _ = pad_batch([built[i] for i in idx], self.pad_id, self.device)
                # One head over every grade token the batch reads (a render's scale reads its own);
                # each prompt's softmax is over its own tokens only.
                wanted = [built[i].grade_ids or self.grade_ids for i in idx]
                union = list(dict.fromkeys(t for w in wanted for t in w))
                # Right padding + causal attention: no mask needed (see slot_grade_logits).
                logits = slot_grade_logits(model, ids, None, reads, union)
                own = grade_probs(logits).cpu().numpy() if union == list(self.grade_ids) else None
            for row, i in enumerate(idx):
                n = len(built[i].read_positions)
                if own is not None:
                    out[i] = own[row, :n]
                else:
                    cols = [union.index(t) for t in wanted[row]]
                    out[i] = grade_probs(logits[row, :n][:, cols]).cpu().numpy()
            tokens = sum(len(built[i].ids) for i in idx)
            self.prompts_read += len(idx)
            self.tokens_read += tokens
            self._progress(len(idx), tokens)

        batches = token_batches([len(b.ids) for b in built], self.batch_size, self.batch_tokens)
        for idx in tqdm(batches, desc="readout", unit="batch", disable=not self.progress, leave=False):
            self.oom_cap, halvings = read_halving(idx, read, cap=self.oom_cap, tokens=lambda i: len(built[i].ids),
                                                  where=f"{self.name} scorer")
            self.oom_halvings += halvings
        return out

    def prepare(self, prompts: Sequence[tuple[str, Sequence[str]] | SlotRequest]) -> list[Prepared]:
        """Each prompt (or :class:`SlotRequest`) built (token ids, read positions) with its
        read-cache key and length."""
        built = [self.builder.build_request(p) for p in prompts]
        out = [Prepared(entry_key(b.ids, b.read_positions, b.grade_ids), len(b.ids), b) for b in built]
        self.prompts_asked += len(out)
        self._distinct.update(p.key for p in out)
        return out

    def plan_batches(self, items: Sequence[Prepared]) -> list[list[int]]:
        """The batches :meth:`read_built` reads: longest first, ``batch_size`` prompts and at most
        ``batch_tokens`` padded tokens each (whatever query a prompt comes from)."""
        return token_batches([p.tokens for p in items], self.batch_size, self.batch_tokens)

    def read_prepared(self, items: Sequence[Prepared]) -> list:
        return self.read_built([p.item for p in items])

    def slot_probs(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list:
        """P(grade) per slot for each prompt: a list of float64 arrays [n_docs, 4], every prompt
        read (the run's read cache, :mod:`presdep.scoring.read_through`, reads only new ones)."""
        return self.read_prepared(self.prepare(prompts))

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        return [readouts_of(p) for p in self.slot_probs(prompts)]

    def score_slots(self, requests: Sequence[SlotRequest]) -> list[list[GradeReadout]]:
        """One readout per line each request reads (capability ``slot_reads``), on its render's scale."""
        return request_readouts(requests, self.slot_probs(requests), self.builder.template)

    def reread_in_batches(self, targets: Sequence[tuple[str, Sequence[str]]],
                          companions: Sequence[tuple[str, Sequence[str]]], rereads: int,
                          seed: int) -> list[list[list[GradeReadout]]]:
        """``rereads`` fresh reads of each target prompt, each inside another batch: per re-read r,
        per target, its readouts (slot order).

        Re-read r puts each target in a batch with ``batch_size - 1`` companions drawn by
        ``random.Random((seed, r))`` from ``companions`` (and the other targets), so the
        companions, the padding and the target's row change from read to read; the read
        cache is bypassed (a stored read would repeat itself). With ``batch_size`` 1 every
        read is the target alone, and on a deterministic backend all re-reads are equal.
        """
        import random

        built_t = [self.build(q, d) for q, d in targets]
        built_c = [self.build(q, d) for q, d in companions]
        self.prompts_asked += rereads * len(built_t)
        out = []
        for r in range(rereads):
            rng = random.Random(f"{seed}:{r}")
            reads = []
            for i, target in enumerate(built_t):
                pool = built_c + built_t[:i] + built_t[i + 1:]
                batch = rng.sample(pool, min(self.batch_size - 1, len(pool)))
                at = rng.randrange(len(batch) + 1)
                batch.insert(at, target)
                reads.append(readouts_of(self.read_built(batch)[at]))
            out.append(reads)
        return out


def make_transformers(run: ScoringRun, prompt: PromptSettings) -> TransformersScorer:
    spec = run.model_entry()
    opts = _runtime_options(run, spec)
    # Names, not torch objects: a job whose every read is cached never imports torch.
    device = opts.get("device") or "auto"
    device = resolve_device_type(device) if device == "auto" else str(device)
    # auto: bfloat16 where this CPU computes it natively, float32 elsewhere (docs/guide/speed.md).
    dtype, reason = resolve_dtype_name(opts.get("dtype"), device.partition(":")[0], inference=True)
    desc = describe_model(spec)
    adapter = run.adapter
    merge = opts.get("merge_adapter")  # None: a spec the schema did not fill (merges() reads it as auto)
    if adapter:
        # A trained LoRA student: base model + adapter directory, merged where merges() says.
        desc = {**desc, "adapter": str(adapter), "adapter_sha256": weights_sha256(adapter)}
        if merges(merge, dtype):
            desc["adapter_read"] = "merged in float32"

    def load() -> Any:
        if not adapter:
            return load_causal_lm(spec, device=device, dtype=dtype)
        return load_student(lambda dt: load_causal_lm(spec, device=device, dtype=dt), adapter,
                            choice=merge, dtype=dtype)

    return TransformersScorer(
        None, load_prompt_tokenizer(spec),
        model_loader=load, device=device, dtype=dtype,
        max_doc_chars=prompt.max_doc_chars,
        **({"batch_size": int(opts["batch_size"])} if "batch_size" in opts else {}),
        batch_tokens=opts.get("batch_tokens"),
        chat_template_kwargs=opts.get("chat_template_kwargs"),
        model_desc=desc,
        template=_template(prompt),
        instruction=prompt.instruction,
        model_identity=lambda: model_identity(spec),
        dtype_reason=reason,
    )


def _runtime_options(run: ScoringRun, spec: Mapping[str, Any]) -> dict:
    """device, dtype, batch_size, ...: the model entry's (where the schema puts them) over
    the same keys given on the variant by a library caller."""
    keys = ("device", "dtype", "batch_size", "batch_tokens", "merge_adapter", "logprobs_k", "readout", "gpu_memory_utilization",
            "chat_template_kwargs")
    return {k: thaw(src[k]) for src in (run.variant.spec, spec) for k in keys if k in src}


def _template(prompt: PromptSettings):
    """The dataset's rubric (a shipped name or a user's file); the relevance rubric when unset."""
    return load_template(prompt.rubric or DEFAULT_TEMPLATE)
