"""PairRM (pairwise reward, both orders) and the jina-reranker-v3 wrapper.

PairRM: a random DebertaV2PairRM of the published layout, built offline from a config;
its scores are checked against the pairwise formula computed here pair by pair, and
its score -> metrics path must show zero instability.

jina-reranker-v3: its published modeling.py cannot be fetched here, so the wrapper is
unit-tested against a stub of the same call signature and architecture class
(tests/jina_stub_modeling.py, loaded through auto_map + trust_remote_code). No table
row is ever produced from the stub."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from scorers_tiny import (
    VARIANT,
    instability_values,
    local_model,
    protocol,
    score_then_metrics,
    tiny_jina_stub,
    tiny_pairrm,
)

from presdep.config.records import PromptSettings, ScoringRun
from presdep.scoring.pairrm import DebertaV2PairRM, pair_ids


@pytest.fixture(scope="module")
def pairrm_dir(tmp_path_factory):
    return tiny_pairrm(tmp_path_factory.mktemp("pairrm") / "m", seed=4)


def test_pairrm_scores_follow_the_symmetrised_pairwise_formula(pairrm_dir):
    from transformers import AutoTokenizer

    from presdep.scoring import make_scorer

    sc = make_scorer(ScoringRun.checked({**VARIANT, "scorer": "pairrm", "model": local_model(pairrm_dir)}), PromptSettings.checked({}))
    prompt, resp = "Say hi", ["hi!", "hello there", "go away", "hey"]
    got = [r.score for r in sc.score(prompt, resp)]
    model = DebertaV2PairRM.from_pretrained(pairrm_dir).eval()
    tok = AutoTokenizer.from_pretrained(pairrm_dir)

    def logit(a, b):  # one comparison alone, unpadded
        ids = torch.tensor([pair_ids(tok, prompt, a, b)])
        with torch.no_grad():
            return float(model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0])

    want = [sum(logit(a, b) - logit(b, a) for b in resp if b != a) / (2 * 3) for a in resp]
    assert got == pytest.approx(want, abs=1e-5)
    assert len({round(x, 6) for x in got}) == 4
    shuffled = [r.score for r in sc.score(prompt, resp[::-1])][::-1]
    assert shuffled == got


def test_pairrm_input_layout():
    from scorers_tiny import char_tokenizer

    tok = char_tokenizer()
    ids = pair_ids(tok, "ab", "c", "d")
    assert tok.convert_ids_to_tokens(ids) == ["<|source|>", "a", "b", "<|candidate1|>", "c", "<|candidate2|>", "d"]


def test_pairrm_score_to_metrics_has_zero_instability(pairrm_dir, tmp_path):
    variant = {**VARIANT, "scorer": "pairrm", "model": local_model(pairrm_dir)}
    _, metrics = score_then_metrics(tmp_path, variant, protocol(B=5, M=3), "response", n_queries=3, n_docs=5)
    inst = instability_values(metrics).filter(pl.col("value").is_not_nan())
    assert inst.height > 0 and {"tau_psi", "pair_flip"} <= set(inst["metric"])
    assert inst["value"].abs().max() == 0.0


@pytest.fixture(scope="module")
def jina_stub_dir(tmp_path_factory):
    return tiny_jina_stub(tmp_path_factory.mktemp("jina") / "m", seed=6)


def test_jina_wrapper_with_a_stub_of_the_published_rerank_call(jina_stub_dir, tmp_path):
    from transformers import AutoModel

    from presdep.scoring import make_scorer

    variant = {**VARIANT, "scorer": "jina_listwise", "model": local_model(jina_stub_dir, trust_remote_code=True)}
    sc = make_scorer(ScoringRun.checked(variant), PromptSettings.checked({"max_doc_chars": 200}))
    docs = ["red apple", "blue sea", "green tree"]
    direct = AutoModel.from_pretrained(jina_stub_dir, trust_remote_code=True).eval().rerank("fruit", docs)
    by_index = {r["index"]: r["relevance_score"] for r in direct}
    assert [r.score for r in sc.score("fruit", docs)] == pytest.approx([by_index[i] for i in range(3)], abs=1e-6)
    # the whole score -> metrics path runs (a listwise model: instability is measured, not assumed)
    scores, metrics = score_then_metrics(tmp_path, variant, protocol(B=3, M=2), "rerank", n_queries=3)
    assert metrics.filter(pl.col("metric") == "tau_psi").height > 0
    assert scores["score"].is_nan().sum() == 0 and scores["p0"].null_count() == scores.height


def test_jina_needs_remote_code_and_a_checked_reply(jina_stub_dir):
    from presdep.scoring.jina_listwise import JinaListwiseScorer, make_jina_listwise

    with pytest.raises(ValueError, match="trust_remote_code"):
        make_jina_listwise(ScoringRun.checked({**VARIANT, "scorer": "jina_listwise", "model": local_model(jina_stub_dir)}), PromptSettings())
    with pytest.raises(ValueError, match="pin the model's revision"):
        make_jina_listwise(ScoringRun.checked({**VARIANT, "scorer": "jina_listwise", "model": {"source": "hf", "id": "jinaai/jina-reranker-v3", "trust_remote_code": True}}), PromptSettings())

    class Short:
        def rerank(self, query, documents):
            return [{"index": 0, "relevance_score": 1.0}]

    with pytest.raises(ValueError, match=r"no score for document\(s\) \[1\]"):
        JinaListwiseScorer(Short()).score("q", ["a", "b"])
