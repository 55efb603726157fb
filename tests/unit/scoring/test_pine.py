"""PINE and its isolated control on tiny random Qwen2 and Qwen3 models with the character
tokenizer: the hand-written forward against the model's own, the segmentation against the
one-pass prompt, the control's exact invariance, PINE's document placement, the registry."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scorers_tiny import VARIANT, char_tokenizer, local_model, qwen_config, save, tiny_causal_lm

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.scoring import make_scorer, registry
from presdep.scoring.pine import PineScorer
from presdep.scoring.pine_forward import (
    allowed_keys,
    build_layout,
    document_importance,
    document_shifts,
    grade_logits,
    tail_importance,
    tail_shifts,
)
from presdep.scoring.pine_prompt import isolated_prompt, segment_prompt
from presdep.scoring.readout import expected_grade, grade_probs, slot_grade_logits
from presdep.scoring.template import SkeletonBuilder

QUERY = "fruit pie recipe"
DOCS = ["red apple pie", "the blue sea at night", "green tree 42", "a stone bridge", "bake apples in a pie dish"]
# Three reorderings of the five documents besides the shown order.
PERMUTATIONS = ([4, 3, 2, 1, 0], [2, 0, 4, 1, 3], [1, 3, 0, 4, 2])


def _qwen3_config(vocab: int):
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=2048)


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer()


@pytest.fixture(scope="module")
def builder(tok):
    return SkeletonBuilder(tok, max_doc_chars=200)


@pytest.fixture(scope="module", params=["qwen2", "qwen3"])
def model(request, tok, builder):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = qwen_config(len(tok)) if request.param == "qwen2" else _qwen3_config(len(tok))
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():  # random heads are near uniform over grades: widen the grade rows
        m.get_output_embeddings().weight[list(builder.grade_ids)] *= 10.0
    assert m.config.model_type == request.param
    return m


def _logits(model, builder, prompt, mode):
    with torch.inference_mode():
        return grade_logits(model, build_layout(prompt, mode), builder.grade_ids)


def _expected(model, builder, docs, mode, order=None):
    """E[g] per document (indexed by document, whatever slot it was shown in)."""
    order = list(range(len(docs))) if order is None else list(order)
    shown = [docs[i] for i in order]
    cut = isolated_prompt if mode == "isolated" else segment_prompt
    e = expected_grade(grade_probs(_logits(model, builder, cut(builder, QUERY, shown), mode)))
    out = np.empty(len(docs))
    out[order] = e.numpy()
    return out


def test_causal_forward_equals_the_models_own(model, builder):
    built = builder.build(QUERY, DOCS)
    with torch.inference_mode():
        own = slot_grade_logits(model, torch.tensor([built.ids]), None, torch.tensor([built.read_positions]),
                                builder.grade_ids)[0]
    mine = _logits(model, builder, segment_prompt(builder, QUERY, DOCS), "causal")
    assert mine.shape == (len(DOCS), 4)
    torch.testing.assert_close(mine, own, atol=1e-5, rtol=0)
    assert float((own - own[0]).abs().max()) > 1e-4  # the slots really differ: the comparison means something


def test_segments_concatenate_to_the_one_pass_prompt(tok, builder):
    docs = [*DOCS[:3], "", "  spaced \n  out  "]
    seg = segment_prompt(builder, QUERY, docs)
    built = builder.build(QUERY, docs)
    assert seg.ids() == built.ids
    assert seg.read_positions() == built.read_positions
    text = [tok.decode(d) for d in seg.documents]
    assert text == ["[1] red apple pie\n", "[2] the blue sea at night\n", "[3] green tree 42\n", "[4]\n",
                    "[5] spaced out"]
    assert tok.decode(seg.prefix).endswith("Documents:\n")
    # (this tokenizer reads the blank line "\n\n" as one unknown token, in both)
    assert tok.decode(seg.suffix[1:]).startswith("Judge each document")
    assert tok.decode(seg.suffix).endswith("<|im_start|>assistant\n")
    assert [tok.decode(line) for line in seg.lines[:2]] == ["[1] Grade: 0", "\n[2] Grade: 0"]
    assert all(line[off + 1] == builder.grade_ids[0] for line, off in zip(seg.lines, seg.read_offsets))


def test_the_isolated_prompt_has_no_slot_in_it(tok, builder):
    seg = isolated_prompt(builder, QUERY, DOCS)
    ordinary = segment_prompt(builder, QUERY, DOCS)
    assert [tok.decode(d) for d in seg.documents] == [f"[1] {d}\n" for d in DOCS]
    assert seg.prefix == ordinary.prefix
    # the blank line after the documents: the last document's newline, then the suffix's
    assert seg.suffix[0] == tok.encode("\n", add_special_tokens=False)[0] and seg.suffix[1:] == ordinary.suffix[1:]
    assert {tuple(line) for line in seg.lines} == {tuple(builder.line_prefix(1) + [builder.grade_ids[0]])}
    assert seg.read_offsets == [len(builder.line_prefix(1)) - 1] * len(DOCS)


def test_a_chat_template_that_drops_the_documents_is_refused():
    tok = char_tokenizer()
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n<|im_end|>\n{% endfor %}"
    with pytest.raises(InvalidInput, match="appears 0 times"):
        segment_prompt(SkeletonBuilder(tok), QUERY, DOCS)


def test_the_layouts_place_and_mask_as_defined(builder):
    seg = segment_prompt(builder, QUERY, DOCS[:3])
    p, lens = len(seg.prefix), [len(d) for d in seg.documents]
    end = p + sum(lens)
    pine, iso = build_layout(seg, "pine"), build_layout(isolated_prompt(builder, QUERY, DOCS[:3]), "isolated")
    pos = pine.positions.tolist()
    assert pos[:p] == list(range(p))
    assert pos[p: p + lens[0]] == list(range(end - lens[0], end))  # right-aligned to E
    assert pos[p + lens[0]: p + lens[0] + lens[1]] == list(range(end - lens[1], end))
    assert pos[end:] == list(range(end, end + len(pos) - end))
    sees = allowed_keys(pine)
    d0, d1 = p, p + lens[0]
    assert sees[d0 + 2, d1 + 5] and not sees[d0 + 2, d0 + 3] and sees[d0 + 2, 0]  # other documents in full
    assert not sees[d0, end] and sees[end, d1 + 5] and not sees[0, 1]
    # isolated: every line at the same positions, seeing its document and the suffix only
    reads = iso.reads.tolist()
    assert len({int(iso.positions[r]) for r in reads}) == 1
    sees = allowed_keys(iso)
    first_doc = slice(p, p + int((iso.block == 1).sum()))
    second_doc = iso.block == 2
    assert sees[reads[0], first_doc].all() and not sees[reads[0], second_doc].any()
    assert sees[reads[1], second_doc].all() and not sees[reads[1], reads[0]]
    assert not sees[iso.block == 4][:, iso.block == 1].any()  # the suffix does not see the documents


def test_isolated_control_is_invariant_to_order_and_not_the_ordinary_read(model, builder):
    base = _expected(model, builder, DOCS, "isolated")
    for order in PERMUTATIONS:
        np.testing.assert_allclose(_expected(model, builder, DOCS, "isolated", order), base, atol=1e-6, rtol=0)
    ordinary = _expected(model, builder, DOCS, "causal")
    assert np.abs(base - ordinary).max() > 5e-4


def test_pine_with_one_document_is_the_causal_forward(model, builder):
    seg = segment_prompt(builder, QUERY, DOCS[:1])
    torch.testing.assert_close(_logits(model, builder, seg, "pine"), _logits(model, builder, seg, "causal"),
                               atol=1e-5, rtol=0)


def _brute_document_shifts(imp, lengths):
    heads, n, _ = imp.shape
    out = np.zeros((heads, n, n), dtype=int)
    for h in range(heads):
        for q in range(n):
            others = sorted((t for t in range(n) if t != q), key=lambda t: (-imp[h, q, t], t))
            at = lengths[q]
            for t in others:
                out[h, q, t] = at
                at += lengths[t]
    return out


def _brute_tail_shifts(imp, lengths):
    out = np.zeros(imp.shape, dtype=int)
    for h in range(imp.shape[0]):
        for x in range(imp.shape[1]):
            at = 0
            for t in sorted(range(imp.shape[2]), key=lambda t: (-imp[h, x, t], t)):
                out[h, x, t] = at
                at += lengths[t]
    return out


def test_pine_shifts_against_brute_force():
    lengths = torch.tensor([2, 3, 4, 5])
    imp = torch.tensor([[[9.0, 0.1, 0.7, 0.2], [0.3, 9.0, 0.3, 0.1], [0.5, 0.4, 9.0, 0.6], [0.0, 0.8, 0.2, 9.0]],
                        [[0.0, 0.2, 0.2, 0.2], [0.9, 0.0, 0.1, 0.5], [0.1, 0.2, 0.0, 0.3], [0.4, 0.4, 0.1, 0.0]]])
    got = document_shifts(imp, lengths)
    np.testing.assert_array_equal(got.numpy(), _brute_document_shifts(imp.numpy(), lengths.tolist()))
    # head 0, document 0 (2 tokens): 2 goes adjacent, then 3, then 1
    assert got[0, 0].tolist() == [0, 2 + 4 + 5, 2, 2 + 4]
    # head 1, document 0: a three-way tie keeps prompt order
    assert got[1, 0].tolist() == [0, 2, 2 + 3, 2 + 3 + 4]
    # head 0, document 1: documents 0 and 2 tie, the earlier is nearer
    assert got[0, 1].tolist() == [3, 0, 3 + 2, 3 + 2 + 4]
    # two documents: each adjacent to the other, whatever the importance
    assert document_shifts(torch.zeros(1, 2, 2), torch.tensor([3, 7]))[0].tolist() == [[0, 3], [7, 0]]
    tail = torch.tensor([[[0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.4, 0.1]]])
    got = tail_shifts(tail, lengths)
    np.testing.assert_array_equal(got.numpy(), _brute_tail_shifts(tail.numpy(), lengths.tolist()))
    assert got[0, 0].tolist() == [3 + 4, 0, 3, 3 + 4 + 2]  # the most important document adjacent to E


def test_pine_importance_against_loops():
    torch.manual_seed(1)
    lengths = [2, 3, 4]
    q, k = torch.randn(2, 9, 8), torch.randn(2, 9, 8)
    tq = torch.randn(2, 5, 8)
    got = document_importance(q, k, torch.tensor(lengths), 0.5)
    tail = tail_importance(tq, k, torch.tensor(lengths), 0.5)
    starts = [0, 2, 5]
    for h in range(2):
        for qd in range(3):
            own = range(starts[qd], starts[qd] + lengths[qd])
            for t in range(3):
                total = 0.0
                for x in own:
                    s = [math.exp(0.5 * float(q[h, x] @ k[h, y])) if y not in own else 0.0 for y in range(9)]
                    total += sum(s[starts[t]: starts[t] + lengths[t]]) / sum(s) / lengths[t]
                assert got[h, qd, t] == pytest.approx(total, abs=1e-6)
        for x in range(5):
            s = [math.exp(0.5 * float(tq[h, x] @ k[h, y])) for y in range(9)]
            for t in range(3):
                want = sum(s[starts[t]: starts[t] + lengths[t]]) / sum(s) / lengths[t]
                assert tail[h, x, t] == pytest.approx(want, abs=1e-6)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _keys_moved_attention(attn, h, layout, allowed, rotary, cos, sin):
    """PINE's attention as the method states it: every query token rotates each key at the
    position that key has for it (its document moved down by its shift), per head."""
    n, hd = h.shape[0], attn.head_dim
    q, k, v = (proj(h).view(n, -1, hd) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    q = q.transpose(0, 1)
    k, v = (t.transpose(0, 1).repeat_interleave(attn.num_key_value_groups, dim=0) for t in (k, v))
    spans = layout.spans
    start, end = spans[0][0], spans[-1][1]
    lengths = [e - s for s, e in spans]
    doc_of = torch.full((n,), -1, dtype=torch.long)
    for t, (s, e) in enumerate(spans):
        doc_of[s:e] = t
    n_docs = len(spans)
    imp = (document_importance(q[:, start:end], k[:, start:end], torch.tensor(lengths), attn.scaling).numpy()
           if n_docs > 2 else np.zeros((q.shape[0], n_docs, n_docs)))
    doc_shift = _brute_document_shifts(imp, lengths)
    tail_shift = _brute_tail_shifts(tail_importance(q[:, end:], k[:, start:end], torch.tensor(lengths),
                                                    attn.scaling).numpy(), lengths)
    out = torch.empty_like(q)
    for head in range(q.shape[0]):
        moved = torch.zeros(n, n, dtype=torch.long)  # [query, key]: how far the key moves down
        for x in range(start, n):
            row = doc_shift[head, doc_of[x]] if x < end else tail_shift[head, x - end]
            moved[x, start:end] = torch.as_tensor(row)[doc_of[start:end]]
        key_at = layout.positions[None, :] - moved
        c, sn = rotary(h, key_at.reshape(1, -1))
        keys = _rotate(k[head][None], c.reshape(n, n, hd), sn.reshape(n, n, hd))
        scores = torch.einsum("xd,xyd->xy", _rotate(q[head], cos, sin), keys) * attn.scaling
        probs = torch.softmax(scores.masked_fill(~allowed, torch.finfo(scores.dtype).min), dim=-1)
        out[head] = probs @ v[head]
    return attn.o_proj(out.transpose(0, 1).reshape(n, -1))


@pytest.mark.parametrize("n_docs", [2, 3])
def test_pine_forward_equals_moving_the_keys(model, builder, monkeypatch, n_docs):
    from presdep.scoring import pine_forward

    seg = segment_prompt(builder, "pie", ["red apple pie", "sea", "a stone bridge"][:n_docs])
    got = _logits(model, builder, seg, "pine")
    monkeypatch.setattr(pine_forward, "_attention", _keys_moved_attention)
    torch.testing.assert_close(got, _logits(model, builder, seg, "pine"), atol=1e-5, rtol=0)


def test_pine_on_slot_free_segments_is_invariant_to_order(model, builder):
    """With nothing slot-dependent in the tokens (the control's segments), PINE's placement
    by importance makes every read independent of the documents' order."""
    base = _logits(model, builder, isolated_prompt(builder, QUERY, DOCS), "pine")
    for order in PERMUTATIONS:
        shown = [DOCS[i] for i in order]
        torch.testing.assert_close(_logits(model, builder, isolated_prompt(builder, QUERY, shown), "pine"), base,
                                   atol=1e-5, rtol=0)
    causal = _logits(model, builder, isolated_prompt(builder, QUERY, DOCS), "causal")
    assert float((base - causal).abs().max()) > 1e-4  # the placement really changed the read


def test_pine_under_permutations(model, builder):
    sc = PineScorer(model, builder.tokenizer, mode="pine", max_doc_chars=200)
    reads = []
    for order in (list(range(len(DOCS))), *PERMUTATIONS):
        ro = sc.score(QUERY, [DOCS[i] for i in order])
        assert len(ro) == len(DOCS)
        for r in ro:
            assert math.isfinite(r.score) and 0.0 <= r.score <= 3.0
            assert sum(r.probs) == pytest.approx(1.0, abs=1e-12)
            assert r.score == pytest.approx(sum(g * p for g, p in enumerate(r.probs)), abs=1e-12)
        e = np.empty(len(DOCS))
        e[order] = [r.score for r in ro]
        reads.append(e)
    assert sc.prompts_read == 4 and sc.describe()["mode"] == "pine"
    # the slot read is PINE's own: not the ordinary readout of the same prompt
    assert np.abs(reads[0] - _expected(model, builder, DOCS, "causal")).max() > 2e-5  # rounding is ~1e-7


def _run(scorer: str, path) -> ScoringRun:
    return ScoringRun.checked({**VARIANT, "scorer": scorer, "model": local_model(path)})


def test_the_registry_builds_both_and_refuses_a_non_qwen_model(tmp_path):
    from transformers import AutoModelForCausalLM, LlamaConfig

    for name in ("pine", "isolated_slots"):
        caps = registry()[name].capabilities
        assert caps.probabilities and caps.batched_listwise and not caps.adapter
        assert caps.tasks == ("rerank", "qa", "response")
    folder = tiny_causal_lm(tmp_path / "qwen2")
    prompt = PromptSettings.checked({"max_doc_chars": 200})
    described = {}
    for name, mode in (("pine", "pine"), ("isolated_slots", "isolated")):
        sc = make_scorer(_run(name, folder), prompt)
        assert isinstance(sc, PineScorer) and sc.name == name and not sc.model_loaded
        ro = sc.score(QUERY, DOCS[:3])
        assert len(ro) == 3 and all(sum(r.probs) == pytest.approx(1.0, abs=1e-12) for r in ro)
        d = sc.describe()
        assert d["scorer"] == name and d["mode"] == mode and d["dtype"] == "float32" and d["device_type"] == "cpu"
        assert d["template"] == "relevance_v2" and len(d["template_sha256"]) == 64
        assert d["grade_token_ids"] == list(sc.grade_ids) and d["model"]["path"] == str(folder)
        described[name] = [r.score for r in ro]
    assert described["pine"] != described["isolated_slots"]

    tok = char_tokenizer()
    torch.manual_seed(0)
    llama = AutoModelForCausalLM.from_config(
        LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048), dtype=torch.float32)
    other = save(llama.eval(), tok, tmp_path / "llama")
    with pytest.raises(InvalidInput, match=r"model '.*llama' has config.model_type 'llama'"):
        make_scorer(_run("pine", other), prompt)
    with pytest.raises(InvalidInput, match="config.model_type 'llama'"):
        PineScorer(llama, tok, mode="isolated")
