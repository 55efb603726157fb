"""Grade logits in float32 on every backend: the transformers readout of a bf16 model equals a
float32 head on the same hidden states, the vLLM host steps read the same probabilities from the
same logits, and the old bf16 head would have failed the comparison."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from presdep.scoring.readout import grade_head_logits, grade_probs, slot_grade_logits
from presdep.scoring.vllm_readout import grade_probs_from_logprobs, token_logits_probs

VOCAB = 96
GRADES = [32, 33, 34, 35]
TOL = 1e-6


def tiny_causal(arch: str = "qwen3", dtype=torch.bfloat16, seed: int = 0, **extra):
    from transformers import AutoModelForCausalLM, GraniteConfig, LlamaConfig, Qwen3Config

    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **extra)
    cfg = {"qwen3": lambda: Qwen3Config(head_dim=16, **common), "llama": lambda: LlamaConfig(**common),
           "granite": lambda: GraniteConfig(logits_scaling=8.0, embedding_multiplier=12.0, **common)}[arch]()
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # grade logits of magnitude 2-10, where bf16 steps are 0.016-0.0625
        model.get_output_embeddings().weight[32:36].mul_(25.0)  # a view: GRADES are rows 32-35
    return model.to(dtype).eval()


def batch(seed: int = 1, n: int = 3, length: int = 40, slots: int = 5):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 32, (n, length), generator=g)
    reads = torch.stack([torch.randperm(length, generator=g)[:slots].sort().values for _ in range(n)])
    return ids, reads


def hidden_rows(model, ids, reads):
    with torch.inference_mode():
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
    return hidden[torch.arange(ids.shape[0]).unsqueeze(1), reads]


def float_head_probs(model, rows) -> np.ndarray:
    """The reference: the full head in float64 on the model's own hidden rows, grades picked after."""
    with torch.no_grad():
        full = rows.to(torch.float64) @ model.get_output_embeddings().weight.to(torch.float64).T
    return torch.softmax(full[..., GRADES], dim=-1).numpy()


def test_bf16_model_reads_as_a_float_head_on_the_same_hidden_states():
    model = tiny_causal()
    ids, reads = batch()
    with torch.inference_mode():
        logits = slot_grade_logits(model, ids, None, reads, GRADES)
    assert logits.dtype == torch.float32
    ours = grade_probs(logits).numpy()
    ref = float_head_probs(model, hidden_rows(model, ids, reads))
    assert np.abs(ours - ref).max() < TOL
    # The probabilities are far from degenerate: the comparison has something to tell apart.
    assert np.median(ours.max(axis=-1)) < 0.99


def test_the_old_bf16_head_would_have_failed_it():
    model = tiny_causal()
    ids, reads = batch()
    rows = hidden_rows(model, ids, reads)
    with torch.inference_mode():
        old = grade_probs(model.get_output_embeddings()(rows)[..., GRADES]).numpy()
    ref = float_head_probs(model, rows)
    assert np.abs(old - ref).max() > 100 * TOL
    # The bf16 head rounds each logit to its step (0.0625-0.25 at these magnitudes).
    with torch.inference_mode():
        old_logits = model.get_output_embeddings()(rows)[..., GRADES]
        exact = rows.float() @ model.get_output_embeddings().weight[GRADES].float().T
    assert old_logits.dtype == torch.bfloat16
    assert torch.abs(old_logits.float() - exact).max() > 1e-2


def test_vllm_host_steps_agree_with_the_transformers_readout_on_the_same_logits():
    """vLLM's pooling classifier returns, per prompt token, the grade rows' float32 logits, and
    its logprobs readout a float32 log-softmax over the vocabulary: both host steps give the
    transformers readout's probabilities."""
    model = tiny_causal()
    ids, reads = batch(n=1)
    with torch.inference_mode():
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0]
        ours = grade_probs(slot_grade_logits(model, ids, None, reads, GRADES))[0].numpy()
        weight = model.get_output_embeddings().weight.float()
        per_token = hidden.float() @ weight[GRADES].T  # [n_tokens, 4], what token_classify returns
        full = torch.log_softmax(hidden.float() @ weight.T, dim=-1)  # what prompt_logprobs carry
    pooled = token_logits_probs(per_token, ids.shape[1], reads[0].tolist())
    assert np.abs(pooled - ours).max() < TOL
    for s, r in enumerate(reads[0].tolist()):
        entry = {t: float(full[r, t]) for t in range(VOCAB)}
        assert np.abs(np.array(grade_probs_from_logprobs(entry, GRADES)) - ours[s]).max() < TOL


@pytest.mark.parametrize("arch", ["qwen3", "llama", "granite"])
def test_float32_readout_matches_the_models_own_forward(arch):
    """In float32 the grade rows give the model's own logits, post-head transforms included
    (Granite divides by ``logits_scaling``, which the old readout left out)."""
    model = tiny_causal(arch, dtype=torch.float32)
    ids, reads = batch()
    with torch.inference_mode():
        ours = slot_grade_logits(model, ids, None, reads, GRADES)
        full = model(input_ids=ids).logits
    own = full[torch.arange(ids.shape[0]).unsqueeze(1), reads][..., GRADES]
    assert torch.allclose(ours, own, atol=1e-4, rtol=1e-5)


def test_grade_rows_carry_a_head_bias_and_gradients():
    head = torch.nn.Linear(8, 12, bias=True)
    rows = torch.randn(2, 3, 8, requires_grad=True)
    out = grade_head_logits(None, head, rows, [1, 5, 7])
    assert torch.allclose(out, head(rows)[..., [1, 5, 7]], atol=1e-6)
    out.sum().backward()
    assert rows.grad is not None and head.weight.grad[[1, 5, 7]].abs().sum() > 0
    assert head.weight.grad[0].abs().sum() == 0


def test_grade_rows_stay_float32_under_a_bf16_autocast():
    """A training step with ``lora_compute_dtype: bfloat16`` runs under autocast; the grade rows do not."""
    head = torch.nn.Linear(16, 40, bias=False)
    with torch.no_grad():
        head.weight.mul_(50.0)
    rows = torch.randn(3, 16)
    exact = rows.double() @ head.weight.double()[[4, 9]].T
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = grade_head_logits(None, head, rows, [4, 9])
        rounded = head(rows)[..., [4, 9]]
    assert out.dtype == torch.float32 and rounded.dtype == torch.bfloat16
    assert (out.double() - exact).abs().max() < 1e-3 < (rounded.double() - exact).abs().max()
