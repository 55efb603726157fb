"""The training-step memory model against real steps measured on the CPU.

:mod:`presdep.training.memory_model` predicts a step's peak from parameter counts and per-token
activation figures. Here its activation part is checked against the CPU allocator's peak during a
real LoRA training step (forward through ``slot_grade_logits`` on a right-padded batch, backward),
measured with torch.profiler's memory events above the level before the step (weights, LoRA
gradients and optimizer state already allocated); its static parts are checked by counting
parameters, gradients and AdamW state exactly. A tolerance of 15% fails a prediction off by 2x.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

from presdep.training import memory_model as mm

REPO = Path(__file__).resolve().parents[3]
LORA = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": list(mm.DEFAULT_TARGETS)}
GRADE_IDS = [11, 12, 13, 14]
VOCAB = 512


def _config(kind: str = "qwen3", hidden: int = 256, layers: int = 2, **extra):
    heads = max(4, hidden // 64)
    fields = dict(hidden_size=hidden, intermediate_size=3 * hidden, num_attention_heads=heads,
                  num_key_value_heads=heads // 2, head_dim=64, num_hidden_layers=layers, vocab_size=VOCAB,
                  tie_word_embeddings=True, use_cache=False)
    fields.update(extra)
    cfg = transformers.AutoConfig.for_model(kind, **fields)
    cfg._attn_implementation = "sdpa"
    return cfg


def _model(cfg, *, checkpoint: bool = False, adapter_dtype: str = "float32", dropout: float = 0.05):
    from presdep.training.lora import add_lora, enable_checkpointing

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
    if checkpoint:  # as the loop does: checkpointing first, then the adapters
        enable_checkpointing(model)
    model = add_lora(model, {**LORA, "dropout": dropout}, seed=1)
    if adapter_dtype != "float32":
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.data = p.data.to(getattr(torch, adapter_dtype))
    return model.train()


def _batch(lengths, reads_per_prompt):
    from presdep.scoring.readout import pad_batch
    from presdep.scoring.template import PromptIds

    g = torch.Generator().manual_seed(0)
    prompts = [PromptIds(ids=torch.randint(20, VOCAB, (n,), generator=g).tolist(),
                         read_positions=[n - 1 - 9 * k for k in range(reads_per_prompt)]) for n in lengths]
    return pad_batch(prompts, 0)


def _measured_step_peak(model, batch) -> int:
    """Bytes the CPU allocator holds at the step's peak above its level before the step."""
    from torch.profiler import ProfilerActivity, profile

    from presdep.scoring.readout import slot_grade_logits

    ids, mask, reads, _ = batch
    lm = model.get_base_model()

    def step():
        logits = slot_grade_logits(lm, ids, mask, reads, GRADE_IDS)
        torch.softmax(logits.float(), dim=-1)[..., 3].sum().backward()

    step()  # allocates the LoRA gradients: the measured step adds activations only
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = prof.profiler.kineto_results.events()
    level = peak = 0
    for _, nbytes in sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"):
        level += nbytes
        peak = max(peak, level)
    return peak


CASES = [  # hidden, layers, prompt lengths, checkpointing, adapter dtype, dropout
    (256, 3, (320, 280), False, "float32", 0.05),
    (512, 2, (256, 230), False, "bfloat16", 0.0),
    (512, 4, (256, 200), True, "float32", 0.05),
    (256, 2, (384, 300), True, "bfloat16", 0.05),
]


@pytest.mark.parametrize("hidden,layers,lengths,checkpoint,adapter,dropout", CASES)
def test_predicted_activation_peak_within_15pct_of_a_measured_step(hidden, layers, lengths, checkpoint, adapter,
                                                                   dropout):
    torch.set_num_threads(2)
    cfg = _config(hidden=hidden, layers=layers)
    model = _model(cfg, checkpoint=checkpoint, adapter_dtype=adapter, dropout=dropout)
    reads = 4
    measured = _measured_step_peak(model, _batch(lengths, reads))
    shape = mm.ModelShape.from_config(cfg)
    s = mm.MemorySettings(adapter_dtype=adapter, dropout=dropout, checkpoint_every_layers=int(checkpoint),
                          masked=True, device="cpu")
    pred = mm.predict_peak(shape, s, tokens=len(lengths) * max(lengths), prompts=len(lengths),
                           read_rows=reads * len(lengths))
    activations = sum(pred.parts[k] for k in ("saved_activations", "recompute", "transient", "read_rows"))
    assert pred.source == "analytic"
    assert abs(activations / measured - 1) < 0.15, (activations, measured, dict(pred.parts))


def test_static_parts_count_weights_gradients_and_adamw_state_exactly():
    cfg = _config(hidden=256, layers=2)
    model = _model(cfg)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-3)
    _measured_step_peak(model, _batch((64, 50), 2))
    opt.step()
    frozen = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    state = sum(t.numel() * t.element_size() for st in opt.state.values() for k, t in st.items() if k != "step")
    lora = sum(p.numel() * p.element_size() + p.grad.numel() * p.grad.element_size() for p in trainable)
    pred = mm.predict_peak(mm.ModelShape.from_config(cfg), mm.MemorySettings(), tokens=64, prompts=1, read_rows=2)
    assert pred.parts["weights"] == frozen
    assert pred.parts["lora_and_optimizer"] == lora + state


@pytest.mark.parametrize("kind,extra", [("qwen3", {}), ("qwen3", {"tie_word_embeddings": False}),
                                        ("llama", {"tie_word_embeddings": False}), ("qwen2", {})])
def test_base_params_equal_a_real_models_parameter_count(kind, extra):
    cfg = _config(kind, hidden=128, layers=2, **extra)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    shape = mm.ModelShape.from_config(cfg)
    assert shape == mm.ModelShape.from_config(cfg.to_dict())
    assert shape.base_params() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("targets", [mm.DEFAULT_TARGETS, ("q_proj", "v_proj", "gate_proj")])
def test_lora_params_equal_peft_trainable_count(targets):
    from presdep.training.lora import add_lora

    cfg = _config(hidden=128, layers=3)
    model = add_lora(transformers.AutoModelForCausalLM.from_config(cfg), {**LORA, "r": 8, "target_modules": targets},
                     seed=0)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert mm.ModelShape.from_config(cfg).lora_params(8, targets) == trainable


QWEN3_4B = mm.ModelShape(hidden=2560, intermediate=9728, heads=32, kv_heads=8, head_dim=128, layers=36,
                         vocab=151936, tied=True)


def test_micro_batch_budget_is_monotone_in_device_bytes_and_zero_when_nothing_fits():
    s = mm.MemorySettings(checkpoint_every_layers=1)
    budgets = [mm.micro_batch_budget(QWEN3_4B, s, device_bytes=g * 2**30, margin=0.1, prompt_tokens=2900,
                                     reads_per_prompt=20) for g in (4, 8, 9, 10, 16, 24, 40, 80, 141)]
    assert budgets == sorted(budgets) and budgets[0] == 0 and budgets[-1] > 2900
    for g, t in zip((8, 9, 10, 16, 24, 40, 80, 141), budgets[1:]):
        limit = 0.9 * g * 2**30
        if t:
            assert t >= 2900
            at = mm.predict_peak(QWEN3_4B, s, tokens=t, prompts=max(1, t // 2900), read_rows=20 * t // 2900)
            assert at.total_bytes <= limit * 1.001
    weights_only = QWEN3_4B.base_params() * 2
    assert mm.micro_batch_budget(QWEN3_4B, s, device_bytes=weights_only, margin=0.0, prompt_tokens=2900,
                                 reads_per_prompt=20) == 0


def test_measured_constants_are_used_at_their_shape_and_agree_with_the_analytic_count():
    constants = mm.load_constants()
    assert constants, "presdep/training/memory_constants.json is missing: run benchmarks/memory_model.py"
    assert {"torch", "transformers", "peft"} <= set(constants["versions"])
    s = mm.MemorySettings(masked=False, device="cpu")
    value, source = mm.per_layer_bytes_per_token(QWEN3_4B, s)
    assert source.startswith("measured: " + mm.settings_key(s))
    analytic = mm.analytic_layer_bytes(QWEN3_4B, s, tokens=0)
    assert abs(value / analytic - 1) < 0.10
    cuda, cuda_source = mm.per_layer_bytes_per_token(QWEN3_4B, mm.MemorySettings(masked=False))
    assert cuda < value and "correction" in cuda_source  # CUDA's dropout masks are 1 byte per element
    other = mm.ModelShape(**{**QWEN3_4B.__dict__, "hidden": 2048})
    assert mm.per_layer_bytes_per_token(other, s)[1] == "analytic"


def test_the_library_imports_without_torch():
    code = "import sys, presdep.training.memory_model; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_benchmark_quick_mode_runs(tmp_path):
    out = tmp_path / "mm.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "memory_model.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert {"torch", "transformers", "peft"} <= set(report["versions"])
    rows = {r["label"]: r for r in report["rows"]}
    lora = rows["LoRA r16 float32 dropout 0.05"]
    assert abs(lora["layer_analytic"] / lora["layer_measured"] - 1) < 0.10
    assert "analytic" in proc.stdout
