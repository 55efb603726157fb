"""Order-invariant pointwise families on tiny random models of their architecture class
(built offline from a config): cross_encoder (BERT sequence classifier), reward_model
(Qwen3 sequence classifier, a Bradley-Terry head), mxbai_rerank (Qwen2 causal LM read as
a 0/1 judge). Each runs score_dataset -> metrics_from_files; every tau-PSI and every
flip over shuffled presentations must be exactly 0."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from scorers_tiny import (
    VARIANT,
    char_tokenizer,
    instability_values,
    local_model,
    protocol,
    score_then_metrics,
    tiny_causal_lm,
    tiny_seq_cls,
)

from presdep.config.records import PromptSettings, ScoringRun
from presdep.scoring.pointwise import MXBAI_TASK, mxbai_prompt


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("pointwise")
    return {"cross_encoder": tiny_seq_cls(root / "ce", "bert", seed=1),
            "reward_model": tiny_seq_cls(root / "rm", "qwen3", seed=2),
            "mxbai_rerank": tiny_causal_lm(root / "mx", seed=3)}


@pytest.mark.parametrize("name,task", [("cross_encoder", "rerank"), ("mxbai_rerank", "rerank"),
                                       ("reward_model", "response")])
def test_order_invariant_family_has_zero_instability(models, tmp_path, name, task):
    variant = {**VARIANT, "scorer": name, "model": local_model(models[name])}
    scores, metrics = score_then_metrics(tmp_path, variant, protocol(B=3 if task == "rerank" else 6), task)
    inst = instability_values(metrics)
    assert {"tau_psi", "tau_psi_b"} <= set(inst["metric"]) and inst.height > 0
    assert any("flip" in m for m in inst["metric"].to_list())
    assert inst["value"].is_nan().sum() < inst.height
    assert inst.filter(pl.col("value").is_not_nan())["value"].abs().max() == 0.0, inst
    # Not a constant scorer: the documents of a query get different scores.
    per_q = scores.filter(pl.col("perturbation") == "first_stage").group_by("query_id").agg(pl.col("score").n_unique())
    assert per_q["score"].min() > 1


def _oracle_seq_cls(path, texts_a, texts_b=None):
    """Each pair alone, unpadded, straight through the model (the independent oracle)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    out = []
    with torch.no_grad():
        for i, a in enumerate(texts_a):
            enc = tok(a, texts_b[i]) if texts_b else tok(a, add_special_tokens=True)
            out.append(float(model(input_ids=torch.tensor([enc["input_ids"]])).logits[0, 0]))
    return out


def test_cross_encoder_batched_scores_equal_one_pair_at_a_time(models):
    from presdep.scoring import make_scorer

    sc = make_scorer(ScoringRun.checked({**VARIANT, "scorer": "cross_encoder", "model": local_model(models["cross_encoder"])}), PromptSettings.checked({}))
    docs = ["a short one", "a considerably longer document text here", "mid length doc"]
    got = [r.score for r in sc.score("the query", docs)]
    want = _oracle_seq_cls(models["cross_encoder"], ["the query"] * 3, docs)
    assert got == pytest.approx(want, abs=1e-5)
    assert all(r.probs is None for r in sc.score("the query", docs))


def test_reward_model_reads_the_chat_conversation(models):
    from presdep.scoring import make_scorer

    sc = make_scorer(ScoringRun.checked({**VARIANT, "scorer": "reward_model", "model": local_model(models["reward_model"])}), PromptSettings.checked({}))
    resp = ["Sure, here it is.", "No.", "A much longer and more detailed answer follows"]
    got = [r.score for r in sc.score("Write a haiku", resp)]
    tok = char_tokenizer()
    texts = [tok.apply_chat_template([{"role": "user", "content": "Write a haiku"},
                                      {"role": "assistant", "content": r}], tokenize=False) for r in resp]
    assert got == pytest.approx(_oracle_seq_cls(models["reward_model"], texts), abs=1e-5)


def test_mxbai_prompt_and_judge_logits(models):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from presdep.scoring import make_scorer

    p = mxbai_prompt("q text", "d text")
    assert p.startswith("<|im_start|>system\nYou are Qwen") and "query: q text\ndocument: d text\n" in p
    assert p.endswith(MXBAI_TASK + "<|im_end|>\n<|im_start|>assistant\n") and MXBAI_TASK.endswith("Relevance:")
    sc = make_scorer(ScoringRun.checked({**VARIANT, "scorer": "mxbai_rerank", "model": local_model(models["mxbai_rerank"])}), PromptSettings.checked({}))
    docs = ["one", "two two", "three three three"]
    got = [r.score for r in sc.score("q text", docs)]
    tok = AutoTokenizer.from_pretrained(models["mxbai_rerank"])  # the class transformers picks for the model
    model = AutoModelForCausalLM.from_pretrained(models["mxbai_rerank"]).eval()
    one, zero = tok.convert_tokens_to_ids("1"), tok.convert_tokens_to_ids("0")
    with torch.no_grad():
        want = []
        for d in docs:
            ids = tok(mxbai_prompt("q text", d), add_special_tokens=False)["input_ids"]
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            want.append(float(logits[one] - logits[zero]))
    assert got == pytest.approx(want, abs=1e-5)
