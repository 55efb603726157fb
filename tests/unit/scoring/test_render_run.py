"""The render perturbations' reads: a render's prompt on the real tiny model (labels, separators,
rubrics, a scale's own grade tokens and placeholder, the read cache), and score_renders with scorers
of known behaviour through the render metrics."""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl
import pytest
from scorers_tiny import fixture, tiny_transformers_scorer

from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import SlotRequest
from presdep.contracts.render_variants import KINDS, SCALES, Render, render_of
from presdep.metrics.render import render_metrics
from presdep.scoring import GradeReadout
from presdep.scoring.read_through import with_read_cache
from presdep.scoring.readout import grade_probs, slot_grade_logits
from presdep.scoring.render_run import score_renders
from presdep.scoring.template import load_template

Q = "query alpha delta"
DOCS = ("river stone cloud", "maple tiger", "ocean lemon piano")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_transformers_scorer(tmp_path_factory.mktemp("render") / "model")


def _head(tiny, template, labels, separator="newline", label_range=None):
    text = tiny.tokenizer.apply_chat_template(
        template.messages(Q, list(DOCS), None, template.default_instruction, labels, separator, label_range),
        tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return text, tiny.tokenizer.encode(text, add_special_tokens=False)


def test_a_relabelled_prompt_shows_and_grades_each_document_under_its_label(tiny):
    render = Render(line_labels=("C", "A", "B"), label_range=("A", "C"))
    got = tiny.builder.build_request(SlotRequest.ordinary(Q, DOCS, render))
    text, head = _head(tiny, tiny.builder.template, ["C", "A", "B"], label_range=("A", "C"))
    assert "[C] river stone cloud\n[A] maple tiger\n[B] ocean lemon piano" in text and "[A] to [C]" in text
    skel, reads = tiny.builder.skeleton(3, ["C", "A", "B"])
    assert got.ids == head + skel and got.read_positions == [len(head) + r for r in reads] and got.grade_ids is None
    assert "".join(tiny.tokenizer.decode(skel).split()) == "[C]Grade:0[A]Grade:0[B]Grade:0"


@pytest.mark.parametrize("separator, shown", [
    ("dash", "[1] river stone cloud\n---\n[2] maple tiger"),
    ("hash", "[1] river stone cloud\n###\n[2] maple tiger"),
    ("xml", "<document>[1] river stone cloud</document>\n<document>[2] maple tiger</document>"),
    ("passage", "Passage 1:\n[1] river stone cloud\nPassage 2:\n[2] maple tiger"),
])
def test_a_separator_keeps_the_labels_and_the_skeleton(tiny, separator, shown):
    got = tiny.builder.build_request(SlotRequest.ordinary(Q, DOCS, Render(separator=separator)))
    text, head = _head(tiny, tiny.builder.template, None, separator)
    assert shown in text
    skel, _ = tiny.builder.skeleton(3)
    assert got.ids == head + skel


def test_the_canonical_render_is_the_ordinary_prompt_and_a_paraphrase_its_own_rubric(tiny):
    ordinary = tiny.builder.build(Q, list(DOCS))
    for kind in KINDS:
        none = render_of(kind, 0, 3, seed=0, rubric="relevance_v2")
        assert tiny.builder.build_request(SlotRequest.ordinary(Q, DOCS, none)).ids == ordinary.ids
    got = tiny.builder.build_request(SlotRequest.ordinary(Q, DOCS, Render(template="relevance_para2_v2")))
    text, head = _head(tiny, load_template("relevance_para2_v2"), None)
    assert "Retrieved documents:" in text and got.ids[:len(head)] == head and got.grade_ids is None


@pytest.mark.parametrize("template, scale", [("relevance_scale09_v2", "0-9"), ("relevance_scale15_v2", "1-5"),
                                             ("relevance_anchored_v2", "anchored"), ("relevance_words_v2", "words")])
def test_a_scale_reads_its_own_grade_tokens_after_its_own_placeholder(tiny, template, scale):
    s = SCALES[scale]
    request = SlotRequest.ordinary(Q, DOCS, Render(template=template))
    built = tiny.builder.build_request(request)
    tok = tiny.tokenizer
    want_ids = tuple(tok.encode(t, add_special_tokens=False)[0] for t in s.tokens)
    assert built.grade_ids == want_ids
    placeholder = tok.encode(s.placeholder, add_special_tokens=False)
    for r in built.read_positions:
        assert built.ids[r + 1: r + 1 + len(placeholder)] == placeholder
    # The score: the scale's mapping of the softmax over its own grade tokens at the read positions.
    import torch

    with torch.inference_mode():
        logits = slot_grade_logits(tiny.model, torch.tensor([built.ids]), None, torch.tensor([built.read_positions]),
                                   want_ids)
    probs = grade_probs(logits)[0].numpy()
    got = [r.score for r in tiny.score_slots([request])[0]]
    assert np.allclose(got, 3 * s.unit(probs), atol=1e-9)
    assert all(r.probs is None for r in tiny.score_slots([request])[0])


def test_scale_reads_and_ordinary_reads_share_a_batch_and_the_read_cache(tiny, tmp_path):
    plain = SlotRequest.ordinary(Q, DOCS)
    scaled = SlotRequest.ordinary(Q, DOCS, Render(template="relevance_scale09_v2"))
    alone = [tiny.score_slots([r])[0] for r in (plain, scaled)]
    together = tiny.score_slots([plain, scaled])
    for a, b in zip(alone, together):
        assert [x.score for x in a] == pytest.approx([x.score for x in b], abs=1e-6)  # float32 batch shapes
    cached = with_read_cache(tiny, tmp_path / "cache", declared=True)
    before = tiny.prompts_read
    first = cached.score_slots([plain, scaled])
    again = cached.score_slots([plain, scaled])
    assert tiny.prompts_read == before + 2  # the second call is answered from the cache
    assert [[x.score for x in r] for r in again] == [[x.score for x in r] for r in first]
    assert [x.score for x in first[1]] == pytest.approx([x.score for x in alone[1]], abs=1e-6)


def _value(*parts: str) -> float:
    return int(hashlib.sha256("|".join(parts).encode()).hexdigest()[:8], 16) / 16**8 * 3


class Surface:
    """A scorer of known behaviour: a document's score is its own value, moved by the label it is
    shown under (``labels``) and by the rubric's name (``rubric``); a separator never moves it."""

    name = "surface"

    def __init__(self, labels: bool = False, rubric: bool = False):
        self.labels, self.rubric = labels, rubric

    def score_slots(self, requests):
        out = []
        for r in requests:
            names = r.render.line_labels if r.render and r.render.line_labels else [str(i) for i in range(1, r.lines + 1)]
            tpl = r.render.template if r.render and r.render.template else "own"
            out.append([GradeReadout(_value(r.docs[line - 1]) + (_value(names[line - 1]) if self.labels else 0.0)
                                     + (_value(tpl, r.docs[line - 1]) if self.rubric else 0.0)) for line in r.read])
        return out


def _metrics(scorer, kinds=KINDS):
    cand, qrels = fixture(6, 8)
    scores = score_renders(cand, scorer, b=4, chunking="contiguous", kinds=kinds, queries=5)
    thresholds = {"t_star": 1.5, "test_queries": sorted(scores["query_id"].unique().to_list())}
    m = render_metrics(scores, qrels, dataset="toy", variant="v", thresholds=thresholds)
    return scores, {(p, x): v for p, x, v in m.filter(pl.col("query_id").is_null())
                    .select("perturbation", "metric", "value").iter_rows()}


def test_a_surface_invariant_scorer_gives_0_for_every_render_term():
    scores, agg = _metrics(Surface())
    assert scores["query_id"].n_unique() == 5
    for kind in KINDS:
        for metric in ("tau_psi", "zeng_psi", "zeng_psi_corpus", "ndcg10_variant_spread", "set_flip"):
            assert agg[(kind, metric)] == 0.0, (kind, metric)
        assert agg[(kind, "jaccard")] == 1.0


def test_a_label_sensitive_scorer_moves_under_id_relabel_and_not_under_separator():
    _, agg = _metrics(Surface(labels=True))
    assert agg[("id_relabel", "tau_psi")] > 0.05 and agg[("id_relabel", "ndcg10_variant_spread")] > 0.0
    for kind in ("separator", "rubric_paraphrase"):
        assert agg[(kind, "tau_psi")] == 0.0 and agg[(kind, "ndcg10_variant_spread")] == 0.0
    _, agg = _metrics(Surface(rubric=True), kinds=("separator", "rubric_paraphrase"))
    assert agg[("rubric_paraphrase", "tau_psi")] > 0.05 and agg[("separator", "tau_psi")] == 0.0


def test_score_renders_refuses_what_cannot_read_a_render():
    cand, _ = fixture(2, 4)

    class Plain:
        name = "plain"

        def score_prompts(self, prompts):
            return [[GradeReadout(0.0) for _ in d] for _, d in prompts]

    with pytest.raises(InvalidInput, match="slot_reads"):
        score_renders(cand, Plain(), b=2, chunking="contiguous", kinds=["separator"])
    with pytest.raises(InvalidInput, match="unknown or no kinds"):
        score_renders(cand, Surface(), b=2, chunking="contiguous", kinds=["font"])
    with pytest.raises(InvalidInput, match="rubric 'own.yaml' has no shipped variants"):
        score_renders(cand, Surface(), b=2, chunking="contiguous", kinds=["scale"], rubric="own.yaml")
