"""What a config will ask of the GPUs, before any GPU time is spent (``presdep plan``).

The training jobs' memory is planned here; the bill per stage and per rule (prompts, tokens,
FLOPs, GPU-hours) is :mod:`presdep.report.plan_stages`'s. For each ``train_student`` job of a config: the micro-batch budget its step is cut by, the
peak memory the memory model (:mod:`presdep.training.memory_model`) predicts for a full
micro-batch, and the GPU memory its profile or config requests. A job fits when its largest
training item (the views a loss term couples, each prompt at the training dataset's prompt
cap, the catalogue's ``max_length``) fits in one micro-batch; the loop checks the same
budget at every step and stops with the prediction when an item does not.

The config is read as the workflow reads it: ``workflow_config.yaml`` with each
``--configfile`` merged in, then validated with the schema's defaults.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from presdep.config import SCHEMA_PATH, load_workflow_config
from presdep.config.catalogue import load_catalogue, lookup
from presdep.config.load import merge_config_files
from presdep.config.records import TrainingSettings, WorkflowConfig
from presdep.config.yaml_io import load_yaml
from presdep.contracts.errors import ConfigError
from presdep.report.plan_shapes import shape_of
from presdep.training.memory_model import ModelShape, micro_batch_budget, predict_peak
from presdep.training.micro_batches import GIB, checkpointing_on, memory_settings, pad_mask_on

# Nominal memory of common training GPUs, in GB (10^9 bytes) as vendors state it: below what
# torch.cuda.mem_get_info reports (80 GB H100: about 79.6 GiB = 85.5e9 bytes), so a plan that
# fits here fits there.
GPU_MEMORY_GB = {"h100": 80, "h200": 141, "a100": 80, "a100-80": 80, "a100-40": 40, "l40s": 48, "l40": 48,
                 "a40": 48, "a6000": 48, "v100": 32, "v100-16": 16, "rtx4090": 24, "mi250x": 128, "mi300x": 192,
                 "gh200": 96, "b200": 180}
TRAINING_RULE = "train_student"
# The GPU a plan assumes when neither a profile nor the config names one (the bill's rates
# assume it too, presdep.report.plan_rates).
ASSUMED_GPU = "h100"


@dataclass(frozen=True)
class TrainingJobPlan:
    """One ``train_student`` job's memory plan (``gpu_gib`` None: runs on the CPU)."""

    rule: str
    job: str
    model: str
    objective: str
    dataset: str
    prompt_tokens: int | None  # the training dataset's prompt cap (catalogue max_length); None: not a catalogue set
    views: int
    micro_batch_tokens: int | None
    prompts_per_micro_batch: int | None
    predicted_peak_gib: float | None
    gpu_gib: float | None
    gpu_source: str
    fits: bool
    memory_source: str
    why: str

    def as_dict(self) -> dict:
        return asdict(self)


def load_config(configfiles: Sequence[str | Path], base: str | Path | None = "workflow_config.yaml") -> WorkflowConfig:
    """The workflow's config records: ``base`` (the embedded default, when it exists) with each file
    merged in as Snakemake merges, the replacing sections replaced, validated with defaults."""
    base = base if base is not None and Path(base).is_file() else None
    _, records = load_workflow_config(merge_config_files(configfiles, base), SCHEMA_PATH)
    return records


def profile_gpu(profiles: Iterable[str | Path], rule: str = TRAINING_RULE) -> tuple[float | None, str]:
    """(GPU memory in GiB, where it came from) that the profiles request for ``rule``'s jobs.

    Later profiles win, as Snakemake layers them; the GPU model is read from ``gpu_model``,
    a ``gres`` such as ``gpu:h100:1`` or ``--gpus=h100:1`` in ``slurm_extra``.
    """
    found: tuple[float | None, str] = (None, "no profile names a GPU model")
    for folder in profiles:
        path = Path(folder) / "config.yaml"
        if not path.is_file():
            raise ConfigError(f"profile {folder}: no config.yaml there")
        data = load_yaml(path) or {}
        for section in ("default-resources", "set-resources"):
            res = data.get(section) or {}
            res = res.get(rule) or {} if section == "set-resources" else res
            name = _gpu_name(res)
            if name is not None:
                if name not in GPU_MEMORY_GB:
                    raise ConfigError(f"{path}: {section}: GPU model {name!r} has no known memory; known: "
                                      f"{sorted(GPU_MEMORY_GB)} (or set student.gpu_mem_gb)")
                found = (GPU_MEMORY_GB[name] * 1e9 / GIB, f"{path} ({section}: {name}, {GPU_MEMORY_GB[name]} GB)")
    return found


def _gpu_name(res: Mapping[str, Any]) -> str | None:
    if res.get("gpu_model"):
        return str(res["gpu_model"]).lower()
    for key in ("gres", "slurm_extra"):
        m = re.search(r"gpu[s]?[:=]([A-Za-z0-9_-]+):\d+", str(res.get(key) or ""))
        if m:
            return m.group(1).lower()
    return None


def training_settings(cfg: WorkflowConfig, variant: str, lam: float) -> TrainingSettings:
    """The settings of one student run, as the workflow gives them to ``train_student``."""
    return TrainingSettings.from_dict(cfg.student_run_settings(variant, lam))


def model_shape(cfg: WorkflowConfig, model: str, resources: Path) -> tuple[ModelShape, str]:
    """A model's shape: its fetched config.json, else a recorded shape (plan_shapes.shape_of)."""
    shape, source = shape_of(cfg.model(model), model, resources)
    if shape is None:
        local = resources / "models" / model / "config.json"
        raise ConfigError(f"{source}; fetch it first (snakemake --cores 1 {local.parent}) so the plan can read its "
                          "layer sizes")
    return shape, source


def plan_training(cfg: WorkflowConfig, *, profiles: Sequence[str | Path] = (), resources: str | Path = "resources",
                  gpu_mem_gb: float | None = None) -> list[TrainingJobPlan]:
    """Every ``train_student`` job of ``cfg`` with its micro-batch and predicted peak."""
    prof_gib, prof_src = profile_gpu(profiles)
    catalogue = load_catalogue()
    out = []
    for name, variant in cfg.trained_variants.items():
        st = variant.student
        ds = cfg.raw["datasets"][st.train]
        cid = ds.get("from_catalogue")
        cap = int(lookup(catalogue, cid)[0]["max_length"]) if cid else None
        # Only a cuda student asks for a GPU (rules/training.smk); elsewhere the step runs at once.
        shape, shape_src = (model_shape(cfg, variant.model, Path(resources)) if st.device == "cuda"
                            else (None, "-"))
        B = int(cfg.datasets[st.train].protocol.B)
        for lam in st.lambdas:
            s = training_settings(cfg, name, lam)
            views = 2 if s.objective == "oc_sft" else 1
            for seed in st.seeds:
                job = f"{name}__lambda{lam:g}/seed{seed}"
                out.append(_job_plan(job, variant.model, s, st.train, cap, views, B, shape, shape_src,
                                     gpu=(gpu_mem_gb, "--gpu-mem-gb") if gpu_mem_gb else (prof_gib, prof_src)))
    return out


def _job_plan(job: str, model: str, s: TrainingSettings, dataset: str, cap: int | None, views: int, B: int,
              shape: ModelShape | None, shape_src: str, gpu: tuple[float | None, str]) -> TrainingJobPlan:
    base = dict(job=job, model=model, objective=s.objective, dataset=dataset, views=views)
    if shape is None:
        return TrainingJobPlan(TRAINING_RULE, prompt_tokens=cap, micro_batch_tokens=None,
                               prompts_per_micro_batch=None, predicted_peak_gib=None, gpu_gib=None,
                               gpu_source=f"no GPU requested (device: {s.device})", fits=True, memory_source="-",
                               why="no GPU requested: the whole step in one pass", **base)
    if cap is None:
        raise ConfigError(f"{job}: training dataset {dataset!r} is not from the catalogue, so no prompt cap "
                          f"(max_length) is known to plan its memory")
    gib, src = (float(s.gpu_mem_gb), "student.gpu_mem_gb") if s.gpu_mem_gb is not None else gpu
    if gib is None:  # the GPU the bill is priced on, said as assumed
        gib = GPU_MEMORY_GB[ASSUMED_GPU] * 1e9 / GIB
        src = (f"assumed {ASSUMED_GPU} ({GPU_MEMORY_GB[ASSUMED_GPU]} GB; {src}): pass --profile with the site "
               "profile, --gpu-mem-gb, or set student.gpu_mem_gb")
    dtype = s.dtype if s.dtype != "auto" else "bfloat16"
    ms = memory_settings(s, checkpointing=checkpointing_on(s, "cuda"), masked=pad_mask_on(s, "cuda"),
                         base_dtype=dtype)
    if s.micro_batch_tokens != "auto":
        budget = int(s.micro_batch_tokens)
    else:
        budget = micro_batch_budget(shape, ms, device_bytes=int(gib * GIB), margin=float(s.memory_margin),
                                    prompt_tokens=cap, reads_per_prompt=B)
    prompts = budget // cap
    fits = prompts >= views
    peak = predict_peak(shape, ms, tokens=max(budget, cap), prompts=max(prompts, 1), read_rows=max(prompts, 1) * B)
    fits = fits and peak.gib <= gib
    why = (f"{prompts} prompt(s) of {cap} tokens per micro-batch" if fits else
           f"one item ({views} x {cap} tokens) does not fit in {gib:.1f} GiB less margin {s.memory_margin:g}")
    return TrainingJobPlan(TRAINING_RULE, prompt_tokens=cap, micro_batch_tokens=budget,
                           prompts_per_micro_batch=prompts, predicted_peak_gib=round(peak.gib, 2),
                           gpu_gib=round(gib, 2), gpu_source=src, fits=fits,
                           memory_source=f"{peak.source}; shape: {shape_src}", why=why, **base)


def format_table(plans: Sequence[TrainingJobPlan]) -> str:
    """The plan as a fixed-width table, one training job a line."""
    head = ("job", "prompt tok", "micro-batch tok", "prompts/mb", "peak GiB", "GPU GiB", "fits")
    rows = [(p.job, _num(p.prompt_tokens), _num(p.micro_batch_tokens), _num(p.prompts_per_micro_batch),
             _num(p.predicted_peak_gib), _num(p.gpu_gib), "yes" if p.fits else "NO") for p in plans]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join

    def fmt(r):
        return line(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([fmt(head), fmt(tuple("-" * w for w in widths)), *(fmt(r) for r in rows)])


def _num(x: Any) -> str:
    return "-" if x is None else (f"{x:,}" if isinstance(x, int) else f"{x:.1f}")


__all__ = ["GPU_MEMORY_GB", "TrainingJobPlan", "load_config", "profile_gpu", "plan_training", "format_table"]
