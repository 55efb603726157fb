"""One real micro-job per GPU rule family, with the config's own models and settings.

- score: a few prompts of the first model variant's scorer (transformers, or vLLM as the
  model entry's ``readout:`` says), prompts of B passages at the dataset's passage cap;
- train: one LoRA step of the largest student at the plan's prompts per micro-batch,
  checkpointed as the job would be;
- reader: one generation batch of the QA reader.

Each is timed after a warm-up (weights loaded, kernels chosen), so its rate is a job's
steady state. Passages are generated text of the protocol's length: the rate depends on the
prompt's length, not its words.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from presdep.config.record_values import thaw
from presdep.config.records import WorkflowConfig
from presdep.report.plan import TrainingJobPlan, training_settings
from presdep.runtime.models import load_causal_lm, load_model, load_tokenizer, resolve_device
from presdep.scoring.factory import make_scorer
from presdep.scoring.frozen_reader import FrozenReader
from presdep.scoring.job import scoring_run
from presdep.training.lora import add_lora, enable_checkpointing
from presdep.training.micro_batches import checkpointing_on
from presdep.training.readout_grad import GradReadout

# The readout path of presdep.report.plan_rates a scorer's reads are priced on.
VLLM_PATHS = {"pooling": "grade_rows", "logprobs": "full_vocab"}
WORDS = ("river", "archive", "protein", "council", "harbour", "signal", "orbit", "ledger", "granite", "festival",
         "lantern", "treaty", "voltage", "meadow", "cipher", "glacier", "manuscript", "reactor", "canal", "summit")
DEFAULT_DOC_CHARS = 600


@dataclass
class MicroJob:
    """One micro-job's figures (``tokens_per_s`` over the timed part only)."""

    family: str
    what: str
    device: str
    prompts: int
    prompt_tokens: int
    seconds: float
    tokens_per_s: float | None
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def passages(n: int, chars: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = f"Passage {i}."
        while len(text) < chars:
            text += " " + " ".join(rng.choice(WORDS) for _ in range(8)) + "."
        out.append(text[:chars])
    return out


def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize()


def _rerank_protocol(cfg: WorkflowConfig) -> tuple[str, Any]:
    for name in cfg.eval_datasets:
        if cfg.datasets[name].task == "rerank":
            return name, cfg.datasets[name].protocol
    name = cfg.eval_datasets[0]
    return name, cfg.datasets[name].protocol


def score_variant(cfg: WorkflowConfig) -> str | None:
    """The first runnable untrained variant that reads a local model in one pass."""
    for name in cfg.runnable_variants:
        v = cfg.variants[name]
        if v.student is None and v.model and v.scorer in ("transformers", "vllm") and v.calibration == "none":
            return name
    return None


def score_micro_job(cfg: WorkflowConfig, resources: Path, prompts: int = 4) -> MicroJob | None:
    name = score_variant(cfg)
    if name is None:
        return None
    v = cfg.variants[name]
    dataset, protocol = _rerank_protocol(cfg)
    entry = thaw(cfg.model(v.model))
    run = scoring_run(name, v.as_dict(), model=entry, model_dir=resources / "models" / v.model)
    scorer = make_scorer(run, protocol.prompt)
    chars = protocol.max_doc_chars or DEFAULT_DOC_CHARS
    asked = [(f"Which passage answers question {k} about the {WORDS[k % len(WORDS)]}?",
              passages(protocol.B, chars, seed=k)) for k in range(prompts + 1)]
    scorer.score_prompts(asked[:1])  # warm-up: weights loaded, kernels chosen
    before = getattr(scorer, "tokens_read", None)
    device = getattr(getattr(scorer, "model", None), "device", "cpu")
    start = time.perf_counter()
    scorer.score_prompts(asked[1:])
    _sync(device)
    seconds = time.perf_counter() - start
    tokens = int(scorer.tokens_read - before) if before is not None else 0
    path = VLLM_PATHS[entry["readout"]] if v.scorer == "vllm" else "slot"
    return MicroJob("score", f"variant {name} ({v.scorer}, model {v.model}) on {dataset}'s protocol, B={protocol.B}",
                    str(device), prompts, tokens, seconds, tokens / seconds if tokens and seconds else None,
                    {"readout_path": path, "model": v.model, "B": protocol.B, "doc_chars": chars})


def largest_student(cfg: WorkflowConfig, plans: Sequence[TrainingJobPlan]) -> tuple[str, TrainingJobPlan | None] | None:
    """The trained variant whose job plans the most tokens per micro-batch (the first when none is planned)."""
    names = list(cfg.trained_variants)
    if not names:
        return None

    def tokens(p: TrainingJobPlan) -> int:
        return p.micro_batch_tokens or 0

    planned = sorted((p for p in plans if p.job.split("__lambda")[0] in names), key=tokens, reverse=True)
    if planned and planned[0].micro_batch_tokens:
        return planned[0].job.split("__lambda")[0], planned[0]
    return names[0], next((p for p in plans if p.job.startswith(names[0] + "__")), None)


def train_micro_job(cfg: WorkflowConfig, resources: Path, plans: Sequence[TrainingJobPlan],
                    steps: int = 2) -> MicroJob | None:
    """``steps`` LoRA steps (the first is the warm-up) at the plan's prompts per micro-batch."""
    import torch

    chosen = largest_student(cfg, plans)
    if chosen is None:
        return None
    name, plan = chosen
    v = cfg.variants[name]
    s = training_settings(cfg, name, v.student.lambdas[0])
    B = int(cfg.datasets[v.student.train].protocol.B)
    chars = cfg.datasets[v.student.train].protocol.max_doc_chars or DEFAULT_DOC_CHARS
    views = 2 if s.objective == "oc_sft" else 1
    n = max(views, (plan.prompts_per_micro_batch or views) if plan else views)
    model, tok = load_model(str(resources / "models" / v.model), device=s.device, dtype=s.dtype)
    device = model.device
    checkpointing = checkpointing_on(s, device.type)
    if checkpointing:
        enable_checkpointing(model)
    model.config.use_cache = False
    model = add_lora(model, thaw(s.lora), seed=0)
    model.train()
    readout = GradReadout(model, tok, max_doc_chars=chars)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    prompts = [(f"Which passage answers question {k}?", passages(B, chars, seed=100 + k)) for k in range(n)]
    built = readout.build(prompts)
    tokens = sum(len(b.ids) for b in built)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        grades = readout.expected_from_built(built)
        loss = sum(((g - 1.5) ** 2).mean() for g in grades) / len(grades)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _sync(device)
        times.append(time.perf_counter() - start)
    timed = times[1:] or times
    seconds = sum(timed) / len(timed)
    detail = {"model": v.model, "variant": name, "checkpointing": checkpointing, "prompts_per_micro_batch": n,
              "step_seconds": [round(t, 4) for t in times], "planned_peak_gib": plan.predicted_peak_gib if plan else None}
    if device.type == "cuda":
        detail["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        detail["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    return MicroJob("train", f"one LoRA step of {name} (model {v.model}), {n} prompt(s) of B={B}", str(device), n,
                    tokens, seconds, tokens / seconds if seconds else None, detail)


def reader_micro_job(cfg: WorkflowConfig, resources: Path) -> MicroJob | None:
    """One generation batch of the QA reader (greedy, ``max_new_tokens``)."""
    reader_cfg = thaw(cfg.reader)
    model_name = reader_cfg.get("model")
    if not model_name:
        return None
    # As rules/reader.smk gives them: the model entry's device and dtype unless the reader sets its own.
    model_spec = thaw(cfg.model(model_name))
    settings = {**{k: model_spec[k] for k in ("device", "dtype") if k in model_spec}, **reader_cfg}
    folder = str(resources / "models" / model_name)
    device = str(resolve_device(settings["device"]))
    model = load_causal_lm(folder, device=device, dtype=settings["dtype"], inference=True)
    batch = int(settings["batch_size"])
    reader = FrozenReader(model, load_tokenizer(folder), max_new_tokens=int(settings["max_new_tokens"]),
                          batch_size=batch)
    items = [(f"Where was the {WORDS[k % len(WORDS)]} signed?", passages(3, 400, seed=200 + k)) for k in range(batch)]
    reader.generate_for(items[:1])  # warm-up
    prompt_tokens = sum(len(reader.prompt_ids(q, ps)) for q, ps in items)
    start = time.perf_counter()
    reader.generate_for(items)
    _sync(model.device)
    seconds = time.perf_counter() - start
    steps = reader.max_new_tokens
    return MicroJob("reader", f"one batch of {batch} reader prompts (model {model_name})", device, batch,
                    prompt_tokens, seconds, None,
                    {"model": model_name, "max_new_tokens": steps, "decode_steps_per_s": steps / seconds})


__all__ = ["MicroJob", "largest_student", "passages", "reader_micro_job", "score_micro_job", "score_variant",
           "train_micro_job"]
