"""The rehearsal's tiny stand-ins of the paper's models: one builder per models: entry of
configs/paper.yaml, byte-identical folders from build to build (in another process too), the
real architecture class, and each folder scored through the presdep scorer of the variant
that uses it in the paper's config."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scorers_tiny import VARIANT, local_model
from workflow_utils import REPO

from presdep.config import load_yaml
from presdep.config.records import PromptSettings, ScoringRun
from presdep.rehearsal.tiny_models import BUILDERS, PAPER_MODELS, build_repo

PAPER = REPO / "configs" / "paper.yaml"

# The class each real checkpoint loads as (written here, not read from the builders).
REAL_CLASS = {
    "qwen3_4b": "Qwen3ForCausalLM",
    "granite_4_1_8b": "GraniteForCausalLM",
    "rank_zephyr_7b": "MistralForCausalLM",
    "mxbai_rerank_base_v2": "Qwen2ForCausalLM",
    "mxbai_rerank_large_v2": "Qwen2ForCausalLM",
    "skywork_reward_v2_qwen3_4b": "Qwen3ForSequenceClassification",
    "pairrm": "DebertaV2PairRM",
}
REAL_TOKENIZER = {"qwen3_4b": "Qwen2Tokenizer", "granite_4_1_8b": "GPT2Tokenizer", "rank_zephyr_7b": "LlamaTokenizer",
                  "mxbai_rerank_base_v2": "Qwen2Tokenizer", "mxbai_rerank_large_v2": "Qwen2Tokenizer",
                  "skywork_reward_v2_qwen3_4b": "Qwen2Tokenizer", "pairrm": "DebertaV2Tokenizer",
                  "jina_reranker_v3": "Qwen2Tokenizer"}
# transformers 5 reads a granite or mistral repository's tokenizer.json through its generic backend,
# whatever class the repository names (the real repositories load the same way).
LOADED_TOKENIZER = {**REAL_TOKENIZER, "granite_4_1_8b": "TokenizersBackend", "rank_zephyr_7b": "TokenizersBackend"}
DOCS = ["red apple pie", "the blue sea at night", "green tree 42", "a stone bridge"]


def _paper() -> dict:
    return load_yaml(PAPER)


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {name: build_repo(name, root / name) for name in PAPER_MODELS}


def _run(name: str, folder: Path, **entry) -> ScoringRun:
    """The paper's variant that reads this model, on the built folder (CPU, float32)."""
    variants = [v for v in _paper()["variants"].values() if v.get("model") == name and v.get("scorer") != "vllm"]
    scorer = variants[0]["scorer"] if variants else "transformers"  # qwen3_4b: the reference backend of vllm
    spec = {**VARIANT, "scorer": scorer, "model": local_model(folder, **entry)}
    if scorer == "generative_listwise":
        spec.update(window=variants[0]["window"], stride=variants[0]["stride"], max_new_tokens=8)
    return ScoringRun.checked(spec)


def _scores(run: ScoringRun, query: str = "fruit pie recipe", docs=DOCS) -> list[float]:
    from presdep.scoring import make_scorer

    got = [r.score for r in make_scorer(run, PromptSettings.checked({"max_doc_chars": 200})).score(query, docs)]
    assert len(got) == len(docs) and all(math.isfinite(s) for s in got), got
    return got


def test_every_paper_model_has_a_builder():
    models = _paper()["models"]
    missing = sorted(set(models) - set(PAPER_MODELS))
    assert not missing, f"configs/paper.yaml models without a tiny-model builder: {missing}"
    assert set(PAPER_MODELS) == set(models), f"builders for models the paper no longer has: {set(PAPER_MODELS) - set(models)}"
    assert set(PAPER_MODELS.values()) <= set(BUILDERS)
    # Each builder serves the scorer the paper's variants run the model with.
    used = {v["model"]: v["scorer"] for v in _paper()["variants"].values() if "model" in v and v["scorer"] != "vllm"}
    assert used == {"jina_reranker_v3": "jina_listwise", "rank_zephyr_7b": "generative_listwise",
                    "mxbai_rerank_base_v2": "mxbai_rerank", "mxbai_rerank_large_v2": "mxbai_rerank",
                    "skywork_reward_v2_qwen3_4b": "reward_model", "pairrm": "pairrm"}
    assert _paper()["reader"]["model"] == "granite_4_1_8b"


def test_unknown_names_and_used_folders_are_refused(tmp_path):
    with pytest.raises(KeyError, match="no tiny-model builder for 'llama_70b'"):
        build_repo("llama_70b", tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.bin").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        build_repo("pairrm", tmp_path / "full")


def test_two_builds_are_byte_identical_here_and_in_another_process(repos, tmp_path):
    first = {name: _digests(folder) for name, folder in repos.items()}
    again = {name: _digests(build_repo(name, tmp_path / "again" / name)) for name in PAPER_MODELS}
    assert again == first
    # Another interpreter, with another string-hash seed: what a commit made elsewhere on this install holds.
    code = ("import sys; from pathlib import Path; from presdep.rehearsal.tiny_models import PAPER_MODELS, build_repo\n"
            "for n in PAPER_MODELS: build_repo(n, Path(sys.argv[1]) / n)\n")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "other")], check=True, env=env, cwd=REPO,
                   capture_output=True, timeout=600)
    assert {name: _digests(tmp_path / "other" / name) for name in PAPER_MODELS} == first


@pytest.mark.parametrize("name", sorted(PAPER_MODELS))
def test_folder_layout_card_and_weights(repos, name):
    from safetensors import safe_open

    folder = repos[name]
    files = set(_digests(folder))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= files
    causal = name in ("qwen3_4b", "granite_4_1_8b", "rank_zephyr_7b", "mxbai_rerank_base_v2", "mxbai_rerank_large_v2")
    assert ("generation_config.json" in files) == causal
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n") and "\n---\n\n" in card
    assert "tiny random stand-in" in card and "not the real model" in card and "presdep rehearsal" in card
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
    assert (folder / "model.safetensors").stat().st_size < 1_000_000  # tiny: loads and scores in well under a second
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_cfg["tokenizer_class"] == REAL_TOKENIZER[name]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    assert type(tok).__name__ == LOADED_TOKENIZER[name]
    # Every digit is one token (the judges read grades so); a metaspace tokenizer (sentencepiece
    # style: Mistral's, DeBERTa's) writes the word start "▁" before a text's first piece, as the real ones do.
    metaspace = name in ("rank_zephyr_7b", "pairrm")
    for digit in "0123456789":
        alone = tok.convert_ids_to_tokens(tok.encode(digit, add_special_tokens=False))
        assert alone == (["▁", digit] if metaspace else [digit])
        graded = tok.convert_ids_to_tokens(tok.encode(f"Grade: {digit}", add_special_tokens=False))
        assert graded[-1] == digit and len(graded) == len("Grade: ") + 1 + metaspace


@pytest.mark.parametrize("name", sorted(REAL_CLASS))
def test_the_architecture_class_is_the_real_ones(repos, name):
    import transformers

    from presdep.scoring.pairrm import DebertaV2PairRM

    folder = repos[name]
    conf = json.loads((folder / "config.json").read_text())
    assert conf["architectures"] == [REAL_CLASS[name]]
    if name == "pairrm":
        model = DebertaV2PairRM.from_pretrained(folder)
    elif name == "skywork_reward_v2_qwen3_4b":
        model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
        assert model.config.num_labels == 1
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == REAL_CLASS[name]
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 2


def test_qwen3_through_the_transformers_scorer(repos):
    from presdep.scoring import make_scorer

    run = _run("qwen3_4b", repos["qwen3_4b"], chat_template_kwargs={"enable_thinking": False})
    sc = make_scorer(run, PromptSettings.checked({"max_doc_chars": 200}))
    readouts = sc.score("fruit pie recipe", DOCS)
    assert type(sc.model).__name__ == "Qwen3ForCausalLM"
    assert len(readouts) == len(DOCS)
    for r in readouts:
        assert math.isfinite(r.score) and 0.0 <= r.score <= 3.0
        assert len(r.probs) == 4 and sum(r.probs) == pytest.approx(1.0)
    assert len({round(r.score, 9) for r in readouts}) > 1


def _qwen3_messages():
    from presdep.scoring.template import load_template

    return load_template().messages("fruit pie recipe", DOCS[:2], 200)


def test_qwen3_renders_enable_thinking_false_as_an_empty_think_block(repos):
    from presdep.scoring import make_scorer

    folder = repos["qwen3_4b"]
    empty = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    # The scorer's own prompt, with the model entry the paper gives (chat_template_kwargs).
    sc = make_scorer(_run("qwen3_4b", folder, chat_template_kwargs={"enable_thinking": False}),
                     PromptSettings.checked({"max_doc_chars": 200}))
    built = sc.build("fruit pie recipe", DOCS[:2])
    head = built.ids[: built.n_prompt_tokens]
    text = sc.tokenizer.decode(head)
    assert text.endswith(empty) and text.startswith("<|im_start|>system\n")
    assert "<think>" in sc.tokenizer.convert_ids_to_tokens(head)  # one added token, as in Qwen3
    # The template itself: without the switch (or with thinking on) no think block is written.
    tok = sc.tokenizer
    for kw in ({}, {"enable_thinking": True}):
        plain = tok.apply_chat_template(_qwen3_messages(), tokenize=False, add_generation_prompt=True, **kw)
        assert plain.endswith("<|im_start|>assistant\n") and "<think>" not in plain
    off = tok.apply_chat_template(_qwen3_messages(), tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith(empty) and off.removesuffix("<think>\n\n</think>\n\n") == plain
    # Qwen3's handling of a finished assistant turn: the last one shows its (empty) reasoning block.
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert tok.apply_chat_template(conv, tokenize=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nhello<|im_end|>\n")


def test_granite_through_the_frozen_qa_reader(repos):
    from presdep.runtime.models import load_causal_lm, load_tokenizer
    from presdep.scoring.reader import FrozenReader

    folder = repos["granite_4_1_8b"]
    # What read_answers_files builds: the tokenizer now, the weights on the first prompt to answer.
    reader = FrozenReader(None, load_tokenizer(str(folder)), max_new_tokens=8, batch_size=2, max_doc_chars=200,
                          model_loader=lambda: load_causal_lm(str(folder), device="cpu", dtype="float32"),
                          model_name=str(folder))
    prompt = reader.tokenizer.decode(reader.prompt_ids("Who built it?", DOCS[:2]))
    assert prompt.startswith("<|start_of_role|>user<|end_of_role|>Paragraphs:\n[1] red apple pie")
    assert prompt.endswith("<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>")
    items = [("Who built it?", DOCS[:2]), ("Where is it?", DOCS[1:3]), ("Who built it?", DOCS[:2])]
    raw = reader.generate_for(items)
    assert type(reader.model).__name__ == "GraniteForCausalLM"
    assert len(raw) == 3 and all(isinstance(t, str) for t in raw) and raw[0] == raw[2]
    assert reader.generated == 2  # the repeated prompt is generated once
    # Greedy and left-padded in a batch: each answer is the prompt's own greedy continuation.
    import torch

    for (q, ps), text in zip(items[:2], raw):
        ids = torch.tensor([reader.prompt_ids(q, ps)])
        out = reader.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=8, eos_token_id=reader.eos_id, pad_token_id=reader.pad_id)
        assert reader.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True) == text
    from presdep.scoring.reader import paper_answer

    assert reader.answer(items, paper_answer) == [reader.answer([it], paper_answer)[0] for it in items]


def test_rank_zephyr_through_generative_listwise(repos):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from presdep.scoring.generative_listwise import window_messages

    folder = repos["rank_zephyr_7b"]
    got = _scores(_run("rank_zephyr_7b", folder))
    assert sorted(got) == [1.0, 2.0, 3.0, 4.0]  # one window: a full ranking, whatever the reply
    tok = AutoTokenizer.from_pretrained(folder)
    text = tok.apply_chat_template(window_messages("q", DOCS[:2]), tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|system|>\nYou are RankLLM") and "</s>\n<|user|>\n" in text
    assert text.endswith("</s>\n<|assistant|>\n")
    assert tok("a")["input_ids"][0] == tok.bos_token_id  # a Llama tokenizer adds <s>
    assert type(AutoModelForCausalLM.from_pretrained(folder)).__name__ == "MistralForCausalLM"


@pytest.mark.parametrize("name", ["mxbai_rerank_base_v2", "mxbai_rerank_large_v2"])
def test_mxbai_through_mxbai_rerank(repos, name):
    from presdep.scoring import make_scorer

    sc = make_scorer(_run(name, repos[name]), PromptSettings.checked({"max_doc_chars": 200}))
    assert type(sc.model).__name__ == "Qwen2ForCausalLM"
    got = [r.score for r in sc.score("fruit pie recipe", DOCS)]
    assert all(math.isfinite(s) for s in got) and len({round(s, 9) for s in got}) == len(DOCS)
    assert [r.score for r in sc.score("fruit pie recipe", DOCS[::-1])] == got[::-1]  # pointwise


def test_the_two_mxbai_sizes_are_different_weights(repos):
    a, b = (_digests(repos[n]) for n in ("mxbai_rerank_base_v2", "mxbai_rerank_large_v2"))
    assert a["model.safetensors"] != b["model.safetensors"] and a["tokenizer.json"] == b["tokenizer.json"]


def test_skywork_through_reward_model(repos):
    from presdep.scoring import make_scorer

    sc = make_scorer(_run("skywork_reward_v2_qwen3_4b", repos["skywork_reward_v2_qwen3_4b"]),
                     PromptSettings.checked({}))
    assert type(sc.model).__name__ == "Qwen3ForSequenceClassification"
    got = [r.score for r in sc.score("Write a haiku", DOCS)]
    assert all(math.isfinite(s) for s in got) and len({round(s, 6) for s in got}) == len(DOCS)


def test_pairrm_through_pairrm(repos):
    from presdep.scoring import make_scorer

    sc = make_scorer(_run("pairrm", repos["pairrm"]), PromptSettings.checked({}))
    assert type(sc.model).__name__ == "DebertaV2PairRM"
    got = [r.score for r in sc.score("Say hi", DOCS)]
    assert all(math.isfinite(s) for s in got) and len({round(s, 6) for s in got}) == len(DOCS)
    assert sum(got) == pytest.approx(0.0, abs=1e-5)  # symmetrised: the pairwise margins cancel
    ids = sc.tokenizer.encode("<|source|>ab")
    assert sc.tokenizer.convert_ids_to_tokens(ids) == ["[CLS]", "<|source|>", "▁", "a", "b", "[SEP]"]


def test_jina_standin_through_jina_listwise(repos):
    from presdep.rehearsal import jina_standin_modeling
    from presdep.scoring import make_scorer

    folder = repos["jina_reranker_v3"]
    assert (folder / "modeling.py").read_bytes() == Path(jina_standin_modeling.__file__).read_bytes()
    assert "stand-in for jina-reranker-v3's own remote code" in (folder / "modeling.py").read_text()
    conf = json.loads((folder / "config.json").read_text())
    assert conf["auto_map"] == {"AutoModel": "modeling.StandInJinaForRanking"} and conf["model_type"] == "qwen3"
    assert "stand-in" in (folder / "README.md").read_text() and "not Jina AI's code" in (folder / "README.md").read_text()
    sc = make_scorer(_run("jina_reranker_v3", folder, trust_remote_code=True),
                     PromptSettings.checked({"max_doc_chars": 200}))
    assert type(sc.model).__name__ == "StandInJinaForRanking"
    got = [r.score for r in sc.score("fruit pie recipe", DOCS)]
    assert all(math.isfinite(s) for s in got) and len({round(s, 9) for s in got}) == len(DOCS)
