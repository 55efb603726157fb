"""LoRA adapters on the expected-grade readout.

transformers: a variant's adapter changes the scores, and adapter scores equal the
merged model's (peft merge_and_unload) within 1e-4. vLLM: the same adapter through
vLLM's LoRA request API must change the scores and match the transformers path; that
test runs only where vLLM (and a GPU) is installed."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from scorers_tiny import VARIANT, local_model, tiny_causal_lm

from presdep.config.records import PromptSettings, ScoringRun

QUERY = "what is the river"
DOCS = ["the river runs to the ocean", "a lemon tree", "stone and cloud", "tiger by the river bank"]
PROTO = {"max_doc_chars": 200, "rubric": "relevance_v2"}


@pytest.fixture(scope="module")
def base_and_adapter(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("lora")
    base = tiny_causal_lm(root / "base", seed=7)
    model = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(8)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
                                            lora_dropout=0.0, init_lora_weights=False))
    with torch.no_grad():  # a trained-looking adapter: B is not zero
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    peft.save_pretrained(root / "adapter")
    merged = peft.merge_and_unload()
    merged.save_pretrained(root / "merged")
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base).save_pretrained(root / "merged")
    return base, root / "adapter", root / "merged"


def _scores(model_dir, adapter=None, scorer="transformers"):
    from presdep.scoring import make_scorer

    v = {**VARIANT, "scorer": scorer, "model": local_model(model_dir)}
    if adapter:
        v["adapter"] = str(adapter)
    return [r.score for r in make_scorer(ScoringRun.checked(v), PromptSettings.checked(PROTO)).score(QUERY, DOCS)]


def test_transformers_adapter_changes_scores_and_equals_the_merged_model(base_and_adapter):
    base, adapter, merged = base_and_adapter
    plain, with_adapter, merged_scores = _scores(base), _scores(base, adapter), _scores(merged)
    assert max(abs(a - b) for a, b in zip(plain, with_adapter)) > 1e-3
    assert with_adapter == pytest.approx(merged_scores, abs=1e-4)


def test_vllm_adapter_goes_through_the_lora_request(base_and_adapter):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed here (the GPU extra); this test runs where it is")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a GPU; none is visible")
    base, adapter, _ = base_and_adapter
    plain, with_adapter = _scores(base, scorer="vllm"), _scores(base, adapter, scorer="vllm")
    assert max(abs(a - b) for a, b in zip(plain, with_adapter)) > 1e-3
    assert with_adapter == pytest.approx(_scores(base, adapter), abs=5e-2)  # bf16 kernels vs float32


def test_vllm_adapter_rank_is_read_from_the_adapter(base_and_adapter, tmp_path):
    import json

    from presdep.scoring.vllm_backend import adapter_rank, vllm_max_lora_rank

    assert adapter_rank(base_and_adapter[1]) == 4
    assert [vllm_max_lora_rank(r) for r in (1, 4, 8, 9, 16, 300, 512)] == [1, 8, 8, 16, 16, 320, 512]
    with pytest.raises(ValueError, match="exceeds"):
        vllm_max_lora_rank(513)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 8, "rank_pattern": {"q_proj": 24}}))
    assert adapter_rank(tmp_path) == 24
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 0}))
    with pytest.raises(ValueError, match="positive integer"):
        adapter_rank(tmp_path)
    (tmp_path / "adapter_config.json").unlink()
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        adapter_rank(tmp_path)


def test_vllm_wrapper_passes_the_lora_request_with_a_stub_engine(base_and_adapter, monkeypatch):
    """Wrapper unit test with a stub of vLLM's engine API (vLLM itself is not installed here):
    the adapter turns LoRA on at engine start and rides on every generate call."""
    import sys
    import types

    from transformers import AutoTokenizer

    from presdep.scoring import make_scorer

    base, adapter, _ = base_and_adapter
    calls: dict = {}

    class LoRARequest:
        def __init__(self, lora_name, lora_int_id, lora_path):
            self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path

    class LLM:
        def __init__(self, model, **kw):
            calls["init"] = {"model": model, **kw}

        def get_tokenizer(self):
            return AutoTokenizer.from_pretrained(base)

        def generate(self, prompts, params, use_tqdm=False, lora_request=None):
            calls.setdefault("lora", []).append(lora_request)
            outs = []
            for p in prompts:  # every position: the four grade tokens, grade g at logprob -g
                ids = p.prompt_token_ids
                lp = [None] + [{t: -float(g) for g, t in enumerate(calls["grade_ids"])} for _ in ids[1:]]
                outs.append(types.SimpleNamespace(prompt_logprobs=lp))
            return outs

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, lambda **kw: kw
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: types.SimpleNamespace(prompt_token_ids=prompt_token_ids)
    lora_mod, req_mod = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    req_mod.LoRARequest = LoRARequest
    for name, mod in (("vllm", vllm), ("vllm.inputs", inputs), ("vllm.lora", lora_mod), ("vllm.lora.request", req_mod)):
        monkeypatch.setitem(sys.modules, name, mod)

    sc = make_scorer(ScoringRun.checked({**VARIANT, "scorer": "vllm", "model": local_model(base, readout="logprobs"), "adapter": str(adapter)}), PromptSettings.checked(PROTO))
    calls["grade_ids"] = sc.grade_ids
    got = sc.score(QUERY, DOCS)
    assert calls["init"]["enable_lora"] is True and calls["init"]["max_lora_rank"] == 8
    assert [r.lora_path for r in calls["lora"]] == [str(adapter)]
    assert sc.describe()["model"]["adapter"] == str(adapter)
    # softmax of logprobs -g over the grades: P(g) proportional to e^-g
    import math

    z = sum(math.exp(-g) for g in range(4))
    assert got[0].score == pytest.approx(sum(g * math.exp(-g) / z for g in range(4)), abs=1e-9)
    plain = make_scorer(ScoringRun.checked({**VARIANT, "scorer": "vllm", "model": local_model(base, readout="logprobs")}), PromptSettings.checked(PROTO))
    plain.score(QUERY, DOCS)
    assert "enable_lora" not in calls["init"] and calls["lora"][-1] is None
