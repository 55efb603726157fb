"""Gradient accumulation inside a step, the unmasked read, and the training options that change
how a step is computed (never what it computes).

For every objective the accumulated gradient of a step split into micro-batches (even and
uneven splits) equals the unsplit step's to 1e-6 relative, on a tiny random model with the
real SmolLM2 tokenizer in float64 (dropout 0: split reads draw dropout masks in another order).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from training_tiny import student_defaults, toy_data

from presdep.config.records import TrainingSettings
from presdep.training.loop import _set_up
from presdep.training.lora import tiny_causal_lm
from presdep.training.micro_batches import StepDoesNotFit, cut_micro_batches
from presdep.training.readout_grad import GradReadout
from presdep.training.train_step import train_step

OBJECTIVES = ["single_order", "order_averaged", "perm_aug", "debias_first", "oc_sft"]
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "down_proj"]}


@pytest.fixture(scope="module")
def tokenizer(smollm2_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_model_dir)


def _run(tok, tmp_path, objective, dtype=torch.float64, **extra):
    """A set-up run whose step changes nothing (lr 0, no clipping), so its gradients can be read."""
    cands, silver, qrels = toy_data(n_queries=3, n_docs=5)
    settings = {**student_defaults(), "objective": objective, "steps": 1, "batch_chunks": 5, "lr": 1e-12,
                "max_grad_norm": 1e12, "lambda": 0.7, "lambda_warmup_steps": 0, "lr_warmup_ratio": 0.0,
                "lora": LORA, **extra}
    # float64, so the comparison measures the accumulation's arithmetic, not float32 rounding.
    model = tiny_causal_lm(tok, seed=0).to(dtype)
    run = _set_up(model, tok, student=TrainingSettings.checked(settings),
                  out_dir=tmp_path, B=2, seed=42, max_doc_chars=None, silver=silver, train_candidates=cands,
                  train_qrels=qrels, objective=None)
    # LoRA's B starts at zero, which leaves A without gradient: give B seeded values, so every
    # adapter weight's gradient is compared.
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in run.model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    run.model.train()
    return run


def _step_grads(run, step=0):
    row, _ = train_step(run, step)
    return row, {n: p.grad.detach().clone() for n, p in run.model.named_parameters() if p.requires_grad}


def _largest_item_tokens(run, step=0):
    from presdep.training.train_step import _step_batch, batch_for_step

    batch = _step_batch(run, batch_for_step(run.seed, step, run.s.batch_chunks, run.n_items))
    sizes = []
    for it in batch:
        q = run.queries[it.query]
        built = run.readout.build([(q.query, [q.docs[i] for i in v]) for v in it.views])
        sizes.append(len(built) * max(len(b.ids) for b in built))
    return max(sizes), len(batch)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_accumulated_gradient_equals_the_unsplit_step(tokenizer, tmp_path, objective):
    whole = _run(tokenizer, tmp_path / "whole", objective)
    row0, g0 = _step_grads(whole)
    assert row0["micro_batches"] == 1 and row0["padded_tokens"] >= row0["tokens"]
    largest, n_items = _largest_item_tokens(whole)
    splits = set()
    for k in (1, 2, 3):  # at most k items of the longest size per micro-batch: 5 alone, 2+2+1, 3+2
        run = _run(tokenizer, tmp_path / f"k{k}", objective, micro_batch_tokens=k * largest)
        row, g = _step_grads(run)
        splits.add(row["micro_batches"])
        assert row["micro_batches"] > 1 and row["tokens"] == row0["tokens"]
        # Sorted micro-batches pad no more than the one unsorted batch.
        assert row["padded_tokens"] <= row0["padded_tokens"]
        for key in ("loss", "supervised", "consistency"):
            if row0.get(key) is not None:
                assert row[key] == pytest.approx(row0[key], rel=1e-6, abs=1e-9), key
        assert g.keys() == g0.keys() and g0
        for name in g0:
            scale = float(g0[name].abs().max())
            assert scale > 0, f"{name}: no gradient reached the adapter"
            err = float((g[name] - g0[name]).abs().max())
            assert err <= 1e-6 * scale, f"{objective} k={k} {name}: {err:.3g} vs max {scale:.3g}"
    assert n_items in splits and len(splits) >= 2  # every item alone, and uneven splits too


def test_the_accumulated_gradient_check_can_fail(tokenizer, tmp_path):
    # A micro-batch normalised by its own denominators (not the step's) gives another gradient.
    whole = _run(tokenizer, tmp_path / "whole", "single_order")
    _, g0 = _step_grads(whole)
    largest, _ = _largest_item_tokens(whole)
    run = _run(tokenizer, tmp_path / "own", "single_order", micro_batch_tokens=2 * largest)
    run.objective.normalizers = lambda queries, batch: {"labelled": 1, "docs": 1}
    _, g = _step_grads(run)
    worst = max(float((g[n] - g0[n]).abs().max()) / float(g0[n].abs().max()) for n in g0)
    assert worst > 1e-3


def test_cut_micro_batches_keeps_items_whole_within_the_budget():
    sizes = [(2, 30), (2, 10), (2, 50), (1, 40), (2, 20), (2, 50)]
    assert [m.items for m in cut_micro_batches(sizes, None)] == [(0, 1, 2, 3, 4, 5)]
    for budget in (100, 120, 200, 1000):
        micro = cut_micro_batches(sizes, budget)
        assert sorted(i for m in micro for i in m.items) == list(range(len(sizes)))
        for m in micro:
            assert m.prompts == sum(sizes[i][0] for i in m.items)
            assert m.padded_tokens == m.prompts * max(sizes[i][1] for i in m.items) <= budget
        flat = [i for m in micro for i in m.items]
        assert [sizes[i][1] for i in flat] == sorted(sizes[i][1] for i in flat)  # sorted by length
    with pytest.raises(StepDoesNotFit, match="2 prompt.*50 tokens"):
        cut_micro_batches(sizes, 99)


def test_a_step_that_cannot_fit_one_item_names_the_job(tokenizer, tmp_path):
    run = _run(tokenizer, tmp_path, "oc_sft", micro_batch_tokens=8)
    with pytest.raises(StepDoesNotFit, match=r"train_student .* step 1: one training item"):
        train_step(run, 0)


def test_the_unmasked_right_padded_read_equals_the_masked_one(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=3).eval()
    readout = GradReadout(model, tokenizer)
    built = readout.build([("where was x born", ["x was born in y", "z"]),
                           ("a much longer query about the city where someone was born", ["a", "b c d e f g h i j"]),
                           ("q", ["only one document here, but a long one " * 4])])
    assert len({len(b.ids) for b in built}) == 3  # three lengths: two of the prompts are padded
    with torch.no_grad():
        masked = readout.grade_logits(built, masked=True)
        unmasked = readout.grade_logits(built, masked=False)
    for a, b in zip(masked, unmasked):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_checkpointing_uses_the_current_api_and_changes_no_gradient(tokenizer, tmp_path):
    _, g0 = _step_grads(_run(tokenizer, tmp_path / "plain", "oc_sft", gradient_checkpointing=False))
    for every in (1, 2):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*gradient_checkpointing_enable.*deprecated")
            run = _run(tokenizer, tmp_path / f"ckpt{every}", "oc_sft", gradient_checkpointing=True,
                       checkpoint_every_layers=every)
        layers = run.model.get_base_model().model.layers
        assert [bool(layer.gradient_checkpointing) for layer in layers] == [i % every == 0 for i in range(len(layers))]
        _, g = _step_grads(run)
        for name in g0:
            torch.testing.assert_close(g[name], g0[name], rtol=1e-5, atol=1e-7)


def test_bfloat16_lora_compute_keeps_float32_masters(tokenizer, tmp_path):
    _, g0 = _step_grads(_run(tokenizer, tmp_path / "f32", "oc_sft", dtype=torch.float32))
    run = _run(tokenizer, tmp_path / "bf16", "oc_sft", dtype=torch.float32, lora_compute_dtype="bfloat16")
    _, g = _step_grads(run)
    assert all(p.dtype == torch.float32 for p in run.params)
    assert all(g[n].dtype == torch.float32 for n in g)
    # bf16 matmuls: close to the float32 gradient, not equal to it.
    num = sum(float((g[n] - g0[n]).norm() ** 2) for n in g0) ** 0.5
    den = sum(float(g0[n].norm() ** 2) for n in g0) ** 0.5
    assert 0 < num / den < 0.1


def test_the_heldout_scorer_reads_sorted_batches_and_returns_the_input_order(tokenizer):
    from presdep.training.readout_grad import ReadoutScorer

    model = tiny_causal_lm(tokenizer, seed=5).eval()
    prompts = [("q long " * 9, ["a b c d e f", "g"]), ("q", ["h"]), ("q mid " * 3, ["i j", "k l m"]),
               ("q", ["n o p q r s t u v w x y z " * 3])]
    batched = ReadoutScorer(model, tokenizer, batch_prompts=3).score_prompts(prompts)
    alone = [ReadoutScorer(model, tokenizer, batch_prompts=1).score_prompts([p])[0] for p in prompts]
    assert [len(r) for r in batched] == [len(d) for _, d in prompts]
    for got, want in zip(batched, alone):
        for g, w in zip(got, want):
            assert g.score == pytest.approx(w.score, abs=1e-5)
