"""Tiny random stand-ins of the paper's models, one hub repository folder each.

:func:`build_repo` writes what a repository holds for loading (config.json,
model.safetensors, the tokenizer files, generation_config.json for the causal LMs, a
model card) with the real model's architecture class and tokenizer class: two layers of
width 32, a vocabulary of single bytes or characters (so every digit is one token, as
the grade readouts need) plus the family's special tokens, and the family's chat
template. Weights come from a numpy generator seeded by the model's name, never from
torch's initialisation, so two builds on one install are byte-identical (a commit of
the folder hashes the same).

:func:`char_tokenizer` is the older character tokenizer the unit tests build their own
tiny models with.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# --- the unit tests' character tokenizer -------------------------------------------------

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>",
            "<|source|>", "<|candidate1|>", "<|candidate2|>", "[CLS]", "[SEP]"]
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def char_tokenizer(pair_template: bool = False):
    """One token per printable character (digits are single tokens, as the judges need)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    vocab = {t: i for i, t in enumerate(SPECIALS + chars)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("<\\|[a-z_0-9]+\\|>|."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    if pair_template:  # a cross-encoder's [CLS] a [SEP] b [SEP]
        tk.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>", eos_token="</s>",
                                  additional_special_tokens=SPECIALS[4:9])
    tok.chat_template = CHAT
    return tok


# --- the families' chat templates ----------------------------------------------------------

# Qwen3's template for system, user and assistant turns (tools left out): an assistant turn
# after the last user query shows its reasoning in <think>, and enable_thinking=false
# appends an empty think block to the generation prompt.
QWEN3_CHAT = """\
{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

# Qwen2.5's ChatML (the base of mxbai-rerank v2), with its default system message.
QWEN2_CHAT = """\
{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Granite's role markup: <|start_of_role|>role<|end_of_role|>text<|end_of_text|> per turn.
GRANITE_CHAT = """\
{%- for message in messages %}
    {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_of_role|>assistant<|end_of_role|>' }}
{%- endif %}
"""

# Zephyr's template (RankZephyr was tuned from zephyr-7b-beta); the role tags are plain text.
ZEPHYR_CHAT = """\
{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>\\n'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""


# --- tokenizers of each family's class, with a byte- or character-level vocabulary -----------

def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte (the byte-level BPE alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _byte_vocab(specials: list[str]) -> dict[str, int]:
    """The 256 byte tokens (ids 0..255, no merges: every character is its bytes), then ``specials``."""
    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    for s in specials:
        vocab[s] = len(vocab)
    return vocab


def _visible_chars() -> list[str]:
    return [c for c in string.printable if not c.isspace()]


def qwen_tokenizer(chat_template: str, *, eos: str, thinking: bool):
    """A ``Qwen2Tokenizer`` (the class Qwen2.5 and Qwen3 repositories name) over single bytes."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    think = ["<think>", "</think>"] if thinking else []
    tok = Qwen2Tokenizer(vocab=_byte_vocab(["<|endoftext|>", "<|im_start|>", "<|im_end|>", *think]), merges=[],
                         unk_token=None, bos_token=None, eos_token=eos, pad_token="<|endoftext|>",
                         extra_special_tokens=["<|im_start|>", "<|im_end|>"])
    # As in Qwen3: the think tags are added tokens but not special (decoding keeps them).
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in think])
    tok.chat_template = chat_template
    return tok


def granite_tokenizer():
    """A ``GPT2Tokenizer`` (Granite's class) over single bytes, with Granite's role tokens."""
    from transformers import GPT2Tokenizer

    roles = ["<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"]
    tok = GPT2Tokenizer(vocab=_byte_vocab(["<|end_of_text|>", *roles, "<|pad|>"]), merges=[],
                        unk_token="<|end_of_text|>", bos_token="<|end_of_text|>", eos_token="<|end_of_text|>",
                        pad_token="<|pad|>", extra_special_tokens=roles)
    tok.chat_template = GRANITE_CHAT
    return tok


def mistral_tokenizer():
    """A ``LlamaTokenizer`` (Mistral's class): <unk> <s> </s>, the 256 byte-fallback tokens, then
    the metaspace and visible characters (whitespace other than the space falls back to bytes)."""
    from transformers import LlamaTokenizer

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for c in ["▁", *_visible_chars()]:
        vocab[c] = len(vocab)
    tok = LlamaTokenizer(vocab=vocab, merges=[], add_bos_token=True, add_eos_token=False, pad_token="</s>")
    tok.chat_template = ZEPHYR_CHAT
    return tok


PAIRRM_PREFIXES = ["<|source|>", "<|candidate1|>", "<|candidate2|>"]


def deberta_tokenizer():
    """A ``DebertaV2Tokenizer`` (DeBERTa-v3's unigram class): [PAD] [CLS] [SEP] [UNK], the
    metaspace and visible characters, [MASK], and PairRM's three prefix tokens."""
    from tokenizers import AddedToken
    from transformers import DebertaV2Tokenizer

    pieces = [("[PAD]", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[UNK]", 0.0)]
    pieces += [(c, -1.0) for c in ["▁", *_visible_chars()]]
    pieces += [("[MASK]", 0.0), *((p, 0.0) for p in PAIRRM_PREFIXES)]
    tok = DebertaV2Tokenizer(vocab=pieces, unk_id=3)
    tok.add_tokens([AddedToken(p, special=True, normalized=False) for p in PAIRRM_PREFIXES], special_tokens=True)
    return tok


# --- weights --------------------------------------------------------------------------------

def _seed(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("/".join(parts).encode("utf-8")).digest()[:8], "little")


def fill_weights(model: Any, name: str) -> Any:
    """Every parameter from ``numpy.random.default_rng`` seeded by (``name``, parameter name).

    Norm gains are 1 and norm biases 0; a head with one output row (a reward or
    relevance logit) gets a wide spread, so the documents of a query score apart.
    """
    import numpy as np
    import torch

    with torch.no_grad():
        for pname, p in sorted(model.named_parameters()):
            rng = np.random.default_rng(_seed(name, pname))
            is_norm = "norm" in pname.lower()
            if is_norm and pname.endswith("weight") and p.dim() == 1:
                values = np.ones(p.shape)
            elif is_norm and pname.endswith("bias"):
                values = np.zeros(p.shape)
            elif p.dim() == 1:
                values = rng.normal(0.0, 0.02, p.shape)
            else:
                values = rng.normal(0.0, 1.0 if p.shape[0] == 1 else 0.1, p.shape)
            p.copy_(torch.from_numpy(values.astype(np.float32)).to(p.dtype))
    return model


# --- the builders ---------------------------------------------------------------------------

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}


@dataclass(frozen=True)
class Builder:
    """One kind of repository: the architecture class it writes and how."""

    kind: str
    architecture: str
    what: str  # the model card's words for the tokenizer and template
    make: Callable[[str], tuple[Any, Any]]  # seed name -> (model, tokenizer)


def _ids(tok: Any, *tokens: str) -> list[int]:
    return [int(tok.convert_tokens_to_ids(t)) for t in tokens]


def _qwen3(arch: str, **extra: Any):
    """Qwen3-4B's tokenizer family and config shape, tiny: (tokenizer, config, <|endoftext|>, <|im_end|>)."""
    from transformers import Qwen3Config

    tok = qwen_tokenizer(QWEN3_CHAT, eos="<|im_end|>", thinking=True)
    end, im_end = _ids(tok, "<|endoftext|>", "<|im_end|>")
    cfg = Qwen3Config(vocab_size=len(tok), **TINY, num_key_value_heads=2, head_dim=8, max_position_embeddings=40960,
                      rms_norm_eps=1e-6, bos_token_id=end, eos_token_id=im_end,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, architectures=[arch], **extra)
    return tok, cfg, end, im_end


def _qwen3_causal(name: str):
    from transformers import GenerationConfig, Qwen3ForCausalLM

    tok, cfg, end, im_end = _qwen3("Qwen3ForCausalLM", tie_word_embeddings=True)
    model = Qwen3ForCausalLM(cfg)
    # Qwen3-4B's own generation defaults (presdep's scorers decode greedily regardless).
    model.generation_config = GenerationConfig(bos_token_id=end, eos_token_id=[im_end, end], pad_token_id=end,
                                               do_sample=True, temperature=0.6, top_k=20, top_p=0.95)
    return model, tok


def _granite_causal(name: str):
    from transformers import GenerationConfig, GraniteConfig, GraniteForCausalLM

    tok = granite_tokenizer()
    end, pad = _ids(tok, "<|end_of_text|>", "<|pad|>")
    cfg = GraniteConfig(vocab_size=len(tok), **TINY, num_key_value_heads=2, max_position_embeddings=131072,
                        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=end, eos_token_id=end,
                        pad_token_id=pad, rope_parameters={"rope_type": "default", "rope_theta": 10000000.0},
                        embedding_multiplier=12.0, logits_scaling=8.0, residual_multiplier=0.22,
                        attention_multiplier=0.125, architectures=["GraniteForCausalLM"])
    model = GraniteForCausalLM(cfg)
    model.generation_config = GenerationConfig(bos_token_id=end, eos_token_id=end, pad_token_id=pad)
    return model, tok


def _mistral_zephyr(name: str):
    from transformers import GenerationConfig, MistralConfig, MistralForCausalLM

    tok = mistral_tokenizer()
    cfg = MistralConfig(vocab_size=len(tok), **TINY, num_key_value_heads=2, head_dim=8,
                        max_position_embeddings=32768, sliding_window=4096, rms_norm_eps=1e-5,
                        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                        architectures=["MistralForCausalLM"])
    model = MistralForCausalLM(cfg)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2)
    return model, tok


def _qwen2_causal(name: str):
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tok = qwen_tokenizer(QWEN2_CHAT, eos="<|endoftext|>", thinking=False)
    (end,) = _ids(tok, "<|endoftext|>")
    cfg = Qwen2Config(vocab_size=len(tok), **TINY, num_key_value_heads=2, max_position_embeddings=32768,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=end, eos_token_id=end,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      architectures=["Qwen2ForCausalLM"])
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(bos_token_id=end, eos_token_id=end)
    return model, tok


def _qwen3_reward(name: str):
    from transformers import Qwen3ForSequenceClassification

    tok, cfg, end, _ = _qwen3("Qwen3ForSequenceClassification", tie_word_embeddings=False, num_labels=1)
    cfg.pad_token_id = end
    return Qwen3ForSequenceClassification(cfg), tok


def _jina_standin(name: str):
    from presdep.rehearsal.jina_standin_modeling import StandInJinaForRanking

    # auto_map: build_repo adds it
    tok, cfg, _, _ = _qwen3(StandInJinaForRanking.__name__, tie_word_embeddings=True)
    return StandInJinaForRanking(cfg), tok


def _pairrm(name: str):
    from transformers import DebertaV2Config

    from presdep.scoring.pairrm import DebertaV2PairRM

    tok = deberta_tokenizer()
    src, c1, c2 = _ids(tok, *PAIRRM_PREFIXES)
    # DeBERTa-v3's attention layout (relative positions, no absolute position embeddings).
    cfg = DebertaV2Config(vocab_size=len(tok), **TINY, max_position_embeddings=512, type_vocab_size=0,
                          relative_attention=True, max_relative_positions=-1, position_buckets=256,
                          norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
                          position_biased_input=False, pad_token_id=int(tok.pad_token_id), n_tasks=1,
                          drop_out=0.05, source_prefix_id=src, cand1_prefix_id=c1, cand2_prefix_id=c2,
                          architectures=["DebertaV2PairRM"])
    return DebertaV2PairRM(cfg), tok


BUILDERS: dict[str, Builder] = {b.kind: b for b in (
    Builder("qwen3_causal_lm", "Qwen3ForCausalLM", "a byte-level Qwen2Tokenizer with Qwen3's chat template "
            "(enable_thinking switch included)", _qwen3_causal),
    Builder("granite_causal_lm", "GraniteForCausalLM", "a byte-level GPT2Tokenizer with Granite's role tokens and "
            "chat template", _granite_causal),
    Builder("mistral_zephyr_causal_lm", "MistralForCausalLM", "a character-level LlamaTokenizer with byte fallback "
            "and Zephyr's chat template", _mistral_zephyr),
    Builder("qwen2_causal_lm", "Qwen2ForCausalLM", "a byte-level Qwen2Tokenizer with Qwen2.5's ChatML template",
            _qwen2_causal),
    Builder("qwen3_reward_model", "Qwen3ForSequenceClassification", "one reward logit, a byte-level Qwen2Tokenizer "
            "with Qwen3's chat template", _qwen3_reward),
    Builder("jina_reranker_v3_standin", "StandInJinaForRanking", "a Qwen3 backbone, a byte-level Qwen2Tokenizer, and "
            "modeling.py, presdep's stand-in for jina-reranker-v3's own remote code (not Jina AI's code), "
            "loaded through auto_map and trust_remote_code", _jina_standin),
    Builder("pairrm", "DebertaV2PairRM", "presdep.scoring.pairrm's DeBERTa-v2 PairRM layout with a character-level "
            "DebertaV2Tokenizer and PairRM's prefix tokens", _pairrm),
)}

# Every models: entry of configs/paper.yaml -> the kind of stand-in it gets.
PAPER_MODELS: dict[str, str] = {
    "qwen3_4b": "qwen3_causal_lm",
    "granite_4_1_8b": "granite_causal_lm",  # the frozen QA reader
    "jina_reranker_v3": "jina_reranker_v3_standin",
    "rank_zephyr_7b": "mistral_zephyr_causal_lm",
    # The mxbai_rerank scorer loads AutoModelForCausalLM; the v2 models are Qwen2 causal LMs.
    "mxbai_rerank_base_v2": "qwen2_causal_lm",
    "mxbai_rerank_large_v2": "qwen2_causal_lm",
    "skywork_reward_v2_qwen3_4b": "qwen3_reward_model",
    "pairrm": "pairrm",
}

SAFETENSORS_METADATA = {"format": "pt"}


def _card(builder: Builder, name: str) -> str:
    subject = f"`{name}` of presdep's configs/paper.yaml" if name in PAPER_MODELS else f"the `{name}` kind"
    return ("---\nlibrary_name: transformers\ntags:\n- presdep-rehearsal\n---\n\n"
            f"A tiny random stand-in of the `{builder.architecture}` class, built for the presdep rehearsal in the "
            f"place of {subject}: two layers of width 32, weights drawn from a numpy generator seeded by that name, "
            f"{builder.what}. It is not the real model and holds none of its weights; its scores and text mean "
            "nothing.\n")


def _rewrite_safetensors(path: Path) -> None:
    """The same tensors, written again with fixed metadata (nothing from the writer's version)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    save_file({k: tensors[k].contiguous() for k in sorted(tensors)}, path, metadata=SAFETENSORS_METADATA)


def resolve_kind(kind_or_model_name: str) -> tuple[str, Builder]:
    kind = PAPER_MODELS.get(kind_or_model_name, kind_or_model_name)
    if kind not in BUILDERS:
        raise KeyError(f"no tiny-model builder for {kind_or_model_name!r}; model names: {sorted(PAPER_MODELS)}, "
                       f"kinds: {sorted(BUILDERS)}")
    return kind, BUILDERS[kind]


def build_repo(kind_or_model_name: str, out_dir: Path) -> Path:
    """Write the repository folder of one stand-in (a paper model name or a builder kind) at ``out_dir``.

    ``out_dir`` must be absent or empty: a stale file from another build would ride along.
    """
    _, builder = resolve_kind(kind_or_model_name)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; build a repository folder into a fresh one")
    out.mkdir(parents=True, exist_ok=True)
    model, tok = builder.make(kind_or_model_name)
    fill_weights(model.eval(), kind_or_model_name)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    _rewrite_safetensors(out / "model.safetensors")
    if builder.kind == "jina_reranker_v3_standin":
        from presdep.rehearsal import jina_standin_modeling

        # The model's code travels with it, as jina-reranker-v3's own modeling.py does.
        shutil.copyfile(jina_standin_modeling.__file__, out / "modeling.py")
        conf = json.loads((out / "config.json").read_text(encoding="utf-8"))
        conf["auto_map"] = {"AutoModel": f"modeling.{builder.architecture}"}
        (out / "config.json").write_text(json.dumps(conf, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out / "README.md").write_text(_card(builder, kind_or_model_name), encoding="utf-8")
    return out


__all__ = ["BUILDERS", "CHAT", "PAPER_MODELS", "SPECIALS", "Builder", "build_repo", "char_tokenizer",
           "deberta_tokenizer", "fill_weights", "granite_tokenizer", "mistral_tokenizer", "qwen_tokenizer",
           "resolve_kind"]
