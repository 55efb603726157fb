"""The context decomposition's reads: slot requests on the scorer interface (token ids, read lines,
the read cache) and score_contexts with scorers of known behaviour."""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl
import pytest
from scorers_tiny import fixture, tiny_transformers_scorer

from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import SlotRequest
from presdep.metrics.context import context_metrics
from presdep.scoring import GradeReadout
from presdep.scoring.backends import IdentityScorer
from presdep.scoring.context_run import CONTEXT_SCORE_SCHEMA, score_contexts
from presdep.scoring.read_through import with_read_cache

Q = "query alpha delta"
DOCS = ("river stone cloud", "maple tiger", "ocean lemon piano")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_transformers_scorer(tmp_path_factory.mktemp("ctx") / "model")


def test_an_ordinary_request_is_the_ordinary_prompt(tiny):
    b = tiny.builder
    got = b.build_request(SlotRequest.ordinary(Q, DOCS))
    want = b.build(Q, list(DOCS))
    assert (got.ids, got.read_positions) == (want.ids, want.read_positions)
    readouts = tiny.score_slots([SlotRequest.ordinary(Q, DOCS)])[0]
    assert [r.score for r in readouts] == pytest.approx([r.score for r in tiny.score_prompts([(Q, list(DOCS))])[0]])


def test_a_skeleton_request_shows_one_document_under_its_label_and_reads_its_line(tiny):
    b = tiny.builder
    got = b.build_request(SlotRequest(Q, (DOCS[1],), (2,), 3, (2,)))
    text = tiny.tokenizer.apply_chat_template(b.template.messages(Q, [DOCS[1]], None, b.instruction, [2]),
                                              tokenize=False, add_generation_prompt=True, enable_thinking=False)
    head = tiny.tokenizer.encode(text, add_special_tokens=False)
    assert "[2] maple tiger" in text and "[1]" not in text.split("Documents:")[1].split("\n")[1]
    skel, reads = b.skeleton(3)
    assert got.ids == head + skel and got.read_positions == [len(head) + reads[1]]
    line = tiny.tokenizer.decode(got.ids[got.read_positions[0] - 12: got.read_positions[0] + 2])
    assert "".join(line.split()).endswith("[2]Grade:0")  # the read token is the one before line 2's grade


def test_reading_one_line_equals_that_line_of_the_full_read(tiny):
    """Causal attention: the line read alone sees what it sees when every line is read."""
    full = tiny.score_slots([SlotRequest.ordinary(Q, DOCS)])[0]
    one = tiny.score_slots([SlotRequest(Q, DOCS, (1, 2, 3), 3, (3,))])[0]
    assert len(one) == 1 and one[0].score == pytest.approx(full[2].score, abs=1e-6)


def test_the_skeleton_arm_at_slot_0_is_the_document_alone(tiny):
    alone, a4 = tiny.score_slots([SlotRequest.ordinary(Q, (DOCS[0],)), SlotRequest(Q, (DOCS[0],), (1,), 3, (1,))])
    assert a4[0].score == pytest.approx(alone[0].score, abs=1e-6)


def test_slot_requests_go_through_the_read_cache(tiny, tmp_path):
    cached = with_read_cache(tiny, tmp_path / "cache", declared=True)
    req = [SlotRequest(Q, (DOCS[2],), (3,), 3, (3,)), SlotRequest(Q, DOCS, (1, 2, 3), 3, (1,))]
    before = tiny.prompts_read
    first = cached.score_slots(req)
    assert tiny.prompts_read == before + 2
    again = cached.score_slots(req)
    assert tiny.prompts_read == before + 2  # both answered from the cache
    assert [r[0].score for r in again] == [r[0].score for r in first]


def _own_value(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8 * 3


class OwnDocument:
    """Reads only the document at the line it is asked for: every arm gives the same score."""

    name = "own"

    def score_slots(self, requests):
        out = []
        for r in requests:
            shown = dict(zip(r.labels, r.docs))
            out.append([GradeReadout(_own_value(shown[line])) for line in r.read])
        return out


class Companions(OwnDocument):
    """A slot's score moves with the lengths of the other documents shown and the skeleton width."""

    def score_slots(self, requests):
        return [[GradeReadout(g.score + 0.01 * sum(len(d) for d in r.docs) + 0.1 * r.lines) for g in got]
                for r, got in zip(requests, super().score_slots(requests))]


def _data(n_queries=4, n_docs=6):
    cand, qrels = fixture(n_queries, n_docs)
    judged = {q: set(g["doc_id"]) - {f"{q}d5"} for (q,), g in qrels.group_by("query_id")}  # d5 unjudged: a donor
    return cand, qrels.filter(pl.col("doc_id").is_in([d for s in judged.values() for d in s])), judged


def test_a_scorer_reading_only_its_document_gives_every_arm_the_same_score():
    cand, qrels, judged = _data()
    got = score_contexts(cand, judged, OwnDocument(), b=4, chunking="contiguous", shuffles=3, queries=3)
    assert got.scores.schema == pl.Schema(CONTEXT_SCORE_SCHEMA)
    by = {(r["query_id"], r["doc_id"], r["arm"], r["presentation"]): r["score"] for r in got.scores.iter_rows(named=True)}
    for (q, d, arm, pres), score in by.items():
        assert score == pytest.approx(by[(q, d, "A1", -1)], abs=1e-12)
    # 3 queries x 6 documents: A1 once, A2-A4 in 4 presentations
    assert got.scores.height == 3 * 6 * (1 + 3 * 4)
    metrics = context_metrics(got.scores, qrels, dataset="toy", variant="own")
    terms = metrics.filter(pl.col("metric").is_in(["width", "companion_content", "companion_presence", "skeleton",
                                                   "score_width", "score_width_abs", "score_skeleton_abs"]))
    assert terms.height > 0 and np.allclose(terms["value"].to_numpy(), 0.0, atol=1e-12)


def test_donors_come_from_other_queries_never_judged_or_pooled_and_never_twice_in_a_context():
    cand, qrels, judged = _data()
    seen: list = []

    class Recording(OwnDocument):
        def score_slots(self, requests):
            seen.extend(requests)
            return super().score_slots(requests)

    got = score_contexts(cand, judged, Recording(), b=3, chunking="contiguous", shuffles=2, queries=2)
    text_owner = {}
    for q, d, t in cand.select("query_id", "doc_id", "doc").iter_rows():
        text_owner.setdefault(" ".join(t.split()), set()).add((q, d))
    a3 = [r for r in seen if len(r.read) == 1 and len(r.docs) > 1]
    assert a3 and len(got.length_errors) == sum(len(r.docs) - 1 for r in a3)
    for r in a3:
        companions = [d for i, d in enumerate(r.docs, start=1) if i != r.read[0]]
        for text in set(companions):  # two documents may share a text: never more copies than documents hold it
            assert companions.count(text) <= len(text_owner[" ".join(text.split())])
    assert got.scores["query_id"].n_unique() == 2


def test_the_identity_scorer_and_the_screen_mode():
    cand, qrels, judged = _data()
    got = score_contexts(cand, judged, IdentityScorer(), b=3, chunking="contiguous", shuffles=2, queries=2,
                         mode="screen")
    assert set(got.scores["arm"]) == {"A1", "A4"} and got.length_errors.size == 0
    a1 = got.scores.filter(pl.col("arm") == "A1")
    assert (a1["score"] == 6 - a1["first_stage_rank"]).all()
    metrics = context_metrics(got.scores, qrels, dataset="toy", variant="id")
    assert set(metrics["metric"]) >= {"ndcg10_A1", "ndcg10_A4", "skeleton"} and "width" not in set(metrics["metric"])
    assert np.allclose(metrics.filter(pl.col("metric") == "skeleton")["value"].to_numpy(), 0.0)


def test_companion_sensitive_scores_move_the_terms_and_unknown_modes_are_refused():
    cand, qrels, judged = _data()
    got = score_contexts(cand, judged, Companions(), b=3, chunking="contiguous", shuffles=2, queries=3)
    metrics = context_metrics(got.scores, qrels, dataset="toy", variant="c")
    agg = {(p, m): v for p, m, v in metrics.filter(pl.col("query_id").is_null())
           .select("perturbation", "metric", "value").iter_rows()}
    assert agg[("context_canonical", "score_skeleton")] == pytest.approx(0.2, abs=0.03)  # 0.1 x (3 lines - 1)
    assert agg[("context_canonical", "score_width_abs")] > agg[("context_canonical", "score_skeleton_abs")]
    with pytest.raises(InvalidInput, match="unknown mode"):
        score_contexts(cand, judged, OwnDocument(), b=3, chunking="contiguous", mode="half")

    class Plain:
        name = "plain"

        def score_prompts(self, prompts):
            return [[GradeReadout(0.0) for _ in d] for _, d in prompts]

    with pytest.raises(InvalidInput, match="slot_reads"):
        score_contexts(cand, judged, Plain(), b=3, chunking="contiguous", shuffles=1, queries=1)


def test_the_tiny_model_runs_every_arm(tiny):
    cand, qrels, judged = _data(3, 5)
    got = score_contexts(cand, judged, tiny, b=3, chunking="contiguous", shuffles=1, queries=2, max_doc_chars=40)
    assert set(got.scores["arm"]) == {"A1", "A2", "A3", "A4"} and got.scores["score"].is_finite().all()
    slot0 = got.scores.filter((pl.col("arm") == "A4") & (pl.col("slot") == 0)).join(
        got.scores.filter(pl.col("arm") == "A1").select("query_id", "doc_id", pl.col("score").alias("alone")),
        on=["query_id", "doc_id"])
    assert slot0.height > 0 and np.allclose(slot0["score"], slot0["alone"], atol=1e-6)


@pytest.mark.parametrize("labels, lines, read, message", [
    ((1, 2), 3, (1,), "each under one label"),
    ((4,), 3, (1,), "distinct lines of the 3-line skeleton"),
    ((2,), 3, (0,), "read must name lines"),
    ((2,), 3, (), "read must name lines"),
])
def test_a_slot_request_refuses_labels_or_lines_outside_its_skeleton(labels, lines, read, message):
    with pytest.raises(InvalidInput, match=message):
        SlotRequest(Q, (DOCS[0],), labels, lines, read)
