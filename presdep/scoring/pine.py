"""PINE and its isolated control as scorers: the grading prompt read one at a time through
the hand-written forward of :mod:`presdep.scoring.pine_forward`.

``pine`` reads the ordinary prompt (labels ``[1]..[n]``) with PINE's attention and position
stacking; ``isolated_slots`` reads the slot-free prompt of
:func:`~presdep.scoring.pine_prompt.isolated_prompt`, where each grade slot sees only the
prefix, its own document and the rubric. Both return P(grade 0..3) per document in slot
order. Batch size 1 (every prompt has its own attention pattern); float32 unless the model
entry names a dtype, since the document order is a sort of attention sums that a coarser
dtype would flip on near ties.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.runtime.models import (
    describe_model,
    load_causal_lm,
    load_tokenizer,
    model_location,
    resolve_device,
    resolve_dtype_choice,
)
from presdep.scoring.backends import _runtime_options, _template
from presdep.scoring.lazy_model import LazyModel
from presdep.scoring.pine_forward import build_layout, check_architecture, grade_logits
from presdep.scoring.pine_prompt import isolated_prompt, segment_prompt
from presdep.scoring.read_cache import Stopwatch
from presdep.scoring.read_through import readouts_of
from presdep.scoring.template import SkeletonBuilder, load_template

# mode -> (registered scorer name, how its prompt is cut)
_MODES = {"pine": ("pine", segment_prompt), "isolated": ("isolated_slots", isolated_prompt)}


class PineScorer(LazyModel, PromptScorer):
    """PINE (``mode="pine"``) or the isolated control (``mode="isolated"``) on a Qwen2/Qwen3 LM.

    ``model`` may be None with a ``model_loader`` (and the ``device`` and ``dtype`` it will
    use): the weights are loaded on the first read. A model whose ``config.model_type`` is
    not qwen2 or qwen3 is refused.
    """

    batch_size = 1

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        mode: str = "pine",
        template: Any = None,
        max_doc_chars: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        instruction: str | None = None,
        model_desc: Mapping[str, Any] | None = None,
        model_name: str | None = None,
        model_loader: Callable[[], Any] | None = None,
        device: Any = None,
        dtype: Any = None,
        dtype_reason: str | None = None,
    ):
        if mode not in _MODES:
            raise InvalidInput(f"unknown PINE scorer mode {mode!r}; expected one of {list(_MODES)}")
        if (model is None) == (model_loader is None):
            raise InvalidInput("give exactly one of model and model_loader")
        if model is None and (device is None or dtype is None):
            raise InvalidInput("a model_loader needs the device and dtype the model will have")
        self.mode = mode
        self.name, self._segment = _MODES[mode]
        if model_name is None and model is not None:
            model_name = getattr(model.config, "name_or_path", None)
        self.model_name = model_name or "?"
        if model is not None:
            check_architecture(model.config, self.model_name)
        self._model, self._model_loader = model, model_loader
        self._device, self._dtype = device, dtype
        if isinstance(template, str):
            template = load_template(template)
        self.tokenizer = tokenizer
        self.builder = SkeletonBuilder(tokenizer, template, max_doc_chars, chat_template_kwargs, instruction)
        self.grade_ids = self.builder.grade_ids
        self.template_sha256 = self.builder.template.sha256
        self.model_desc = dict(model_desc or {"class": type(model).__name__ if model is not None else "?"})
        self.dtype_reason = dtype_reason
        self.load = Stopwatch()
        self.forward = Stopwatch()
        self.prompts_asked = 0
        self.prompts_read = 0
        self.tokens_read = 0
        # Called as on_progress(prompts, tokens) per prompt read; score_dataset sets it for its bar.
        self.on_progress: Callable[[int, int], None] | None = None

    def _check_loaded(self, model: Any) -> None:
        check_architecture(model.config, self.model_name)

    def describe(self) -> dict:
        return self.readout_description(mode=self.mode)

    def slot_probs(self, query: str, docs: Sequence[str]):
        """P(grade) per slot for one prompt: float64 array [n_docs, 4] in slot order."""
        import torch

        from presdep.scoring.readout import grade_probs

        model = self.model  # loads the weights on the first read, outside the forward stopwatch
        layout = build_layout(self._segment(self.builder, query, docs), self.mode)
        with torch.inference_mode(), self.forward:
            probs = grade_probs(grade_logits(model, layout, self.grade_ids)).cpu().numpy()
        tokens = int(layout.ids.numel())
        self.prompts_read += 1
        self.tokens_read += tokens
        if self.on_progress is not None:
            self.on_progress(1, tokens)
        return probs

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        self.prompts_asked += len(prompts)
        return [readouts_of(self.slot_probs(q, d)) for q, d in prompts]


def _dtype(choice: Any, device: Any) -> tuple[Any, str]:
    import torch

    if choice in (None, "auto"):
        return torch.float32, "PINE reads in float32 unless the model entry names a dtype"
    return resolve_dtype_choice(choice, device, inference=True)


def _make(run: ScoringRun, prompt: PromptSettings, mode: str) -> PineScorer:
    from transformers import AutoConfig

    spec = run.model_entry()
    opts = _runtime_options(run, spec)
    device = resolve_device(opts.get("device"))
    dtype, reason = _dtype(opts.get("dtype"), device)
    name = str(spec.get("name") or spec.get("id") or spec.get("path") or "?")
    where, kw = model_location(spec)
    check_architecture(AutoConfig.from_pretrained(where, **kw), name)  # before any weights load
    return PineScorer(
        None, load_tokenizer(spec), mode=mode,
        model_loader=lambda: load_causal_lm(spec, device=str(device), dtype=dtype),
        device=device, dtype=dtype, dtype_reason=reason,
        max_doc_chars=prompt.max_doc_chars,
        chat_template_kwargs=opts.get("chat_template_kwargs"),
        model_desc=describe_model(spec), model_name=name,
        template=_template(prompt),
        instruction=prompt.instruction,
    )


def make_pine(run: ScoringRun, prompt: PromptSettings) -> PineScorer:
    return _make(run, prompt, "pine")


def make_isolated_slots(run: ScoringRun, prompt: PromptSettings) -> PineScorer:
    return _make(run, prompt, "isolated")


__all__ = ["PineScorer", "make_isolated_slots", "make_pine"]
