"""The vLLM readouts against presdep.scoring.readout on a tiny random Qwen3.

vLLM is not installed here. The host steps (presdep.scoring.vllm_readout) are fed what
vLLM's documented outputs hold, computed from the same tiny model: a token classifier's
``[num_tokens, 4]`` rows (the LM head's grade rows, as ``classifier_from_token`` with
``method: no_post_processing`` loads them), top-k prompt logprobs, and one full-vocabulary
next-token read. The scorer's wiring is run on a stub engine that computes them the same way.
"""

from __future__ import annotations

import json
import math
import sys
import types

import numpy as np
import pytest
import torch
from scorers_tiny import VARIANT, char_tokenizer, local_model

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.scoring.readout import grade_probs, slot_grade_logits
from presdep.scoring.template import SkeletonBuilder, load_template
from presdep.scoring.vllm_readout import (
    ReadStats,
    classifier_tokens,
    complete,
    logprob_reads,
    pooling_overrides,
    pooling_refusal,
    seq_cls_architecture,
    token_logits_probs,
)

PROTO = {"max_doc_chars": 200, "rubric": "relevance_v2"}
PROMPTS = [("what is the river", ["the river runs to the ocean", "a lemon tree", "stone and cloud", "a bank"]),
           ("maple piano", ["piano keys", "maple syrup", "a cloud of dust"])]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Qwen3 causal LM (tied LM head, as Qwen3-4B) saved with a character tokenizer."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    tok = char_tokenizer()
    torch.manual_seed(3)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    builder = SkeletonBuilder(tok, load_template("relevance_v2"), 200)
    with torch.no_grad():  # random rows are near-uniform over grades: widen them so slots differ
        model.get_output_embeddings().weight[list(builder.grade_ids)] *= 6.0
    out = tmp_path_factory.mktemp("vllm-readout") / "qwen3"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return types.SimpleNamespace(dir=out, model=model, tok=tok, builder=builder,
                                 built=[builder.build(q, d) for q, d in PROMPTS])


def reference(model, b, grade_ids) -> np.ndarray:
    """The transformers readout: LM head at the read rows, softmax over the four grade logits."""
    with torch.inference_mode():
        ids = torch.tensor([b.ids])
        reads = torch.tensor([b.read_positions])
        return grade_probs(slot_grade_logits(model, ids, None, reads, grade_ids))[0].numpy()


def token_classifier(model, tok, ids, tokens) -> torch.Tensor:
    """What vLLM's converted classifier returns for token_classify without activation: every
    token's final hidden state times ``lm_head.weight[convert_tokens_to_ids(tokens)]``, in float32."""
    rows = [tok.convert_tokens_to_ids(t) for t in tokens]
    with torch.inference_mode():
        hidden = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        return hidden.float() @ model.get_output_embeddings().weight[rows].float().T


def log_softmax(model, ids) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].double().log_softmax(-1)


def prompt_logprobs(model, ids, k) -> list:
    """vLLM's prompt_logprobs: None, then per token t the top k of the distribution that predicted
    it (computed at t - 1) and token t itself, as Logprob-like objects."""
    lsm = log_softmax(model, ids)
    out: list = [None]
    for t in range(1, len(ids)):
        top = torch.topk(lsm[t - 1], k).indices.tolist()
        out.append({i: types.SimpleNamespace(logprob=float(lsm[t - 1, i])) for i in {*top, ids[t]}})
    return out


def next_token_logprobs(model, prefix) -> dict:
    """One generated token's logprobs over the whole vocabulary (logprobs=-1)."""
    row = log_softmax(model, prefix)[-1]
    return {i: types.SimpleNamespace(logprob=float(v)) for i, v in enumerate(row.tolist())}


def test_pooling_overrides_cut_the_classifier_from_the_grade_rows(tiny, tmp_path):
    grade_ids = tiny.builder.grade_ids
    tokens = classifier_tokens(tiny.tok, grade_ids)
    assert tokens == ["0", "1", "2", "3"]
    assert pooling_overrides(["Qwen3ForCausalLM"], tokens) == {
        "architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": ["0", "1", "2", "3"],
        "method": "no_post_processing", "num_labels": 4}
    with pytest.raises(InvalidInput, match="not a \\*ForCausalLM"):
        seq_cls_architecture("Gemma3ForConditionalGeneration")
    assert pooling_refusal(["Qwen3ForCausalLM"], None, "0.33.0") is None
    assert pooling_refusal(["Qwen3ForCausalLM"], None, "0.21.0rc1.dev3+gabc") is None
    assert "predates 0.21" in pooling_refusal(["Qwen3ForCausalLM"], None, "0.20.2")
    assert "caps its logits" in pooling_refusal(["Gemma2ForCausalLM"], 30.0, "0.33.0")
    assert "not one *ForCausalLM" in pooling_refusal(["Gemma3ForConditionalGeneration"], None, "0.33.0")
    cfg = tmp_path / "adapter_config.json"
    cfg.write_text(json.dumps({"r": 8, "target_modules": ["q_proj", "v_proj"]}))
    assert pooling_refusal(["Qwen3ForCausalLM"], None, "0.33.0", tmp_path) is None
    for changed in ({"target_modules": ["q_proj", "lm_head"]}, {"target_modules": ".*(q_proj|lm_head)"},
                    {"target_modules": ["q_proj"], "modules_to_save": ["lm_head"]},
                    {"target_modules": ["q_proj"], "modules_to_save": ["embed_tokens"]}):
        cfg.write_text(json.dumps({"r": 8, **changed}))
        assert "LoRA cannot reach it" in pooling_refusal(["Qwen3ForCausalLM"], None, "0.33.0", tmp_path)


def test_pooling_readout_equals_the_reference_readout(tiny):
    grade_ids = tiny.builder.grade_ids
    tokens = classifier_tokens(tiny.tok, grade_ids)
    for b in tiny.built:
        data = token_classifier(tiny.model, tiny.tok, b.ids, tokens)
        probs = token_logits_probs(data, len(b.ids), b.read_positions)
        assert probs.dtype == np.float64 and probs.shape == (len(b.read_positions), 4)
        np.testing.assert_allclose(probs, reference(tiny.model, b, grade_ids), rtol=0, atol=1e-6)
        row = data[b.read_positions[1]].double().tolist()  # by hand: slot 2 is row read_positions[1]
        z = sum(math.exp(x) for x in row)
        assert probs[1] == pytest.approx([math.exp(x) / z for x in row], abs=1e-12)
    assert len({tuple(np.round(p, 3)) for p in reference(tiny.model, tiny.built[0], grade_ids)}) > 1  # slots differ


def test_a_token_classifier_output_of_another_shape_is_refused(tiny):
    b = tiny.built[0]
    with pytest.raises(RuntimeError, match=r"shape \(5, 4\), expected"):
        token_logits_probs(torch.zeros(5, 4), len(b.ids), b.read_positions)
    with pytest.raises(RuntimeError, match="expected"):
        token_logits_probs(torch.zeros(len(b.ids), 151936), len(b.ids), b.read_positions)  # a full vocabulary


def test_a_grade_outside_the_top_k_gets_an_exact_second_read(tiny):
    grade_ids = tiny.builder.grade_ids
    k = 2  # with the actual (dummy "0") token: at most three tokens per position, never all four grades
    plps = [prompt_logprobs(tiny.model, b.ids, k) for b in tiny.built]
    asked: list[list[list[int]]] = []

    def read_second(prefixes):
        asked.append(prefixes)
        return [next_token_logprobs(tiny.model, p) for p in prefixes]

    probs, made = logprob_reads(tiny.built, plps, grade_ids, read_second, k)
    assert made and len(asked) == 1  # every second read of the call in one request
    for x in made:
        b = tiny.built[x.prompt]
        r = b.read_positions[x.slot]
        assert x.ids == b.ids[: r + 1] and not complete(plps[x.prompt][r + 1], grade_ids)
    assert [x.ids for x in made] == asked[0]
    for b, p in zip(tiny.built, probs):  # the final P(grade) is the exact one, second reads included
        np.testing.assert_allclose(p, reference(tiny.model, b, grade_ids), rtol=0, atol=1e-6)
    stats = ReadStats()
    stats.add(made)
    assert stats.take() == {"second_reads": len({x.prompt for x in made}), "second_read_slots": len(made)}
    assert stats.take() == {"second_reads": 0, "second_read_slots": 0}
    assert stats.total["second_read_slots"] == len(made)
    # Every grade among the returned tokens: no second read, the same probabilities.
    full = [prompt_logprobs(tiny.model, b.ids, len(tiny.tok)) for b in tiny.built]
    again, none = logprob_reads(tiny.built, full, grade_ids, lambda _: pytest.fail("no second read"), None)
    assert none == []
    for p, q in zip(probs, again):  # a prefix re-read differs from the whole prompt's in float32's last bits
        np.testing.assert_allclose(p, q, rtol=0, atol=1e-6)


def test_prompt_logprobs_of_the_wrong_length_are_refused(tiny):
    b = tiny.built[0]
    with pytest.raises(RuntimeError, match="prompt logprobs for"):
        logprob_reads([b], [[None]], tiny.builder.grade_ids, lambda _: [], 20)


def _stub_vllm(monkeypatch, calls):
    """vLLM's offline API as this scorer calls it, computing its documented outputs on the tiny model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    class LLM:
        def __init__(self, model, **kw):
            calls["init"] = {"model": model, **kw}
            self.hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
            self.tok = AutoTokenizer.from_pretrained(model)

        def encode(self, prompts, params, *, use_tqdm, lora_request, pooling_task):
            calls["encode"].append({"params": params, "pooling_task": pooling_task, "lora": lora_request})
            tokens = calls["init"]["hf_overrides"]["classifier_from_token"]
            return [types.SimpleNamespace(outputs=types.SimpleNamespace(
                data=token_classifier(self.hf, self.tok, p.prompt_token_ids, tokens))) for p in prompts]

        def generate(self, prompts, params, *, use_tqdm, lora_request):
            calls["generate"].append({"params": params, "n": len(prompts), "lora": lora_request})
            if params.get("prompt_logprobs") is not None:
                return [types.SimpleNamespace(prompt_logprobs=prompt_logprobs(self.hf, p.prompt_token_ids,
                                                                              params["prompt_logprobs"]))
                        for p in prompts]
            assert params["logprobs"] == -1 and params["max_tokens"] == 1
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(
                logprobs=[next_token_logprobs(self.hf, p.prompt_token_ids)])]) for p in prompts]

    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.33.0"
    vllm.LLM, vllm.SamplingParams, vllm.PoolingParams = LLM, dict, dict
    inputs, config = types.ModuleType("vllm.inputs"), types.ModuleType("vllm.config")
    inputs.TokensPrompt = lambda prompt_token_ids: types.SimpleNamespace(prompt_token_ids=prompt_token_ids)
    config.PoolerConfig = types.SimpleNamespace
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda name, int_id, path: types.SimpleNamespace(lora_name=name, lora_int_id=int_id,
                                                                            lora_path=path)
    for name, mod in (("vllm", vllm), ("vllm.inputs", inputs), ("vllm.config", config), ("vllm.lora", lora),
                      ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)


def _adapter(root, **cfg):
    """A PEFT adapter directory as far as the scorer reads it before the engine loads it."""
    root.mkdir()
    (root / "adapter_config.json").write_text(json.dumps({"r": 4, "target_modules": ["q_proj", "v_proj"], **cfg}))
    return root


@pytest.mark.parametrize("readout", ["pooling", "logprobs"])
@pytest.mark.parametrize("with_adapter", [False, True])
def test_the_scorer_reads_through_the_cache_on_a_stub_engine(tiny, tmp_path, monkeypatch, readout, with_adapter):
    from presdep.scoring import make_scorer
    from presdep.scoring.read_through import ReadThrough, with_read_cache

    calls: dict = {"encode": [], "generate": []}
    _stub_vllm(monkeypatch, calls)
    adapter = {"adapter": str(_adapter(tmp_path / "adapter"))} if with_adapter else {}
    run = ScoringRun.checked({**VARIANT, "scorer": "vllm", **adapter,
                              "model": local_model(tiny.dir, readout=readout, logprobs_k=4)})
    sc = make_scorer(run, PromptSettings.checked(PROTO))
    grade_ids = sc.grade_ids
    assert not sc.model_loaded and sc.describe()["readout"] == readout
    ident = sc.cache_identity()
    assert ident["readout"] == readout and ident["vllm"] == "0.33.0" and ident["dtype"] == "float32"
    rt = with_read_cache(sc, tmp_path / "read_cache")
    assert isinstance(rt, ReadThrough)
    prompts = [*PROMPTS, PROMPTS[0]]  # a repeat is read once
    got = rt.slot_probs(prompts)
    for (q, d), p in zip(prompts, got):
        np.testing.assert_allclose(p, reference(tiny.model, tiny.builder.build(q, d), grade_ids), rtol=0, atol=1e-6)
    init = calls["init"]
    if readout == "pooling":
        assert init["runner"] == "pooling" and "max_logprobs" not in init
        assert init["hf_overrides"] == pooling_overrides(["Qwen3ForCausalLM"], ["0", "1", "2", "3"])
        assert init["pooler_config"].task == "token_classify"
        assert [c["pooling_task"] for c in calls["encode"]] == ["token_classify"] and not calls["generate"]
        assert calls["encode"][0]["params"] == {"use_activation": False}
        assert sc.take_stats() == {}
    else:
        assert init["max_logprobs"] == -1 and "runner" not in init
        first = calls["generate"][0]["params"]
        assert first["prompt_logprobs"] == 4 and first["max_tokens"] == 1
        missing = sum(not complete(prompt_logprobs(tiny.model, b.ids, 4)[r + 1], grade_ids)
                      for b in tiny.built for r in b.read_positions)
        assert len(calls["generate"]) == (2 if missing else 1)
        assert sc.take_stats()["second_read_slots"] == missing and sc.take_stats()["second_read_slots"] == 0
    assert sc.prompts_read == 2 and sc.tokens_read == sum(len(b.ids) for b in tiny.built)
    assert sc.forward.seconds > 0 and sc.model_loaded and rt.prompts_asked == 3 and rt.distinct_prompts == 2
    engine_calls = len(calls["encode"]) + len(calls["generate"])
    again = rt.slot_probs(PROMPTS)  # all stored: no engine call
    assert len(calls["encode"]) + len(calls["generate"]) == engine_calls
    for p, q in zip(got, again):
        np.testing.assert_array_equal(p, q)
    readouts = sc.score_prompts(PROMPTS[:1])  # without the cache: E[g] of the same probabilities
    assert [r.score for r in readouts[0]] == pytest.approx(list(got[0] @ np.arange(4.0)), abs=1e-12)
    requests = [c["lora"] for c in calls["encode"] + calls["generate"]]
    if with_adapter:  # on every engine call, second reads included; the engine started with LoRA on
        assert init["enable_lora"] is True and init["max_lora_rank"] == 8 and init["max_loras"] == 1
        assert {r.lora_path for r in requests} == {adapter["adapter"]}
        assert ident["adapter_sha256"] and sc.describe()["model"]["adapter"] == adapter["adapter"]
    else:
        assert "enable_lora" not in init and set(requests) == {None} and ident["adapter_sha256"] is None


def test_pooling_refuses_an_adapter_that_trains_the_lm_head(tiny, tmp_path, monkeypatch):
    from presdep.scoring import make_scorer

    _stub_vllm(monkeypatch, {"encode": [], "generate": []})
    adapter = str(_adapter(tmp_path / "adapter", modules_to_save=["lm_head"]))
    v = {**VARIANT, "scorer": "vllm", "adapter": adapter, "model": local_model(tiny.dir, readout="pooling")}
    with pytest.raises(InvalidInput, match=r"lm_head \(modules_to_save\).*set `readout: logprobs`"):
        make_scorer(ScoringRun.checked(v), PromptSettings.checked(PROTO))
    v["model"] = local_model(tiny.dir, readout="logprobs")  # the logprobs readout reads the adapted head
    assert make_scorer(ScoringRun.checked(v), PromptSettings.checked(PROTO)).lora_request.lora_path == adapter
