"""Silver labels: presentations, alignment by doc id, labels, the contract and metadata."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from presdep.presentations import random_shuffle, stable_seed
from presdep.schemas import read_metadata, read_table, write_table
from presdep.scoring import GradeReadout
from presdep.training.silver import silver_labels, silver_labels_files, teacher_orders

REPO = Path(__file__).resolve().parents[1]


def candidates(n_q=3, n_d=7):
    rows = [{"query_id": f"q{q}", "query": f"where was entity {q} born", "doc_id": f"q{q}-d{d}",
             "doc": f"doc number {d} of query {q}", "first_stage_rank": d + 1, "first_stage_score": float(-d)}
            for q in range(n_q) for d in range(n_d)]
    return pl.DataFrame(rows).with_columns(pl.col("first_stage_rank").cast(pl.Int32))


class SlotScorer:
    """score = doc number + 10 * slot: checks that every score lands on its own doc id and slot."""

    name = "slot"
    template_sha256 = "x"

    def __init__(self):
        self.prompts = []

    def score_prompts(self, prompts):
        self.prompts += prompts
        return [[GradeReadout(float(int(d.split()[2]) + 10 * s)) for s, d in enumerate(docs)] for _, docs in prompts]


def test_presentations_alignment_and_labels():
    scorer = SlotScorer()
    c = candidates()
    df = silver_labels(c, lambda p: [[r.score for r in ro] for ro in scorer.score_prompts(p)],
                       teacher="t", dataset="ds", T=3, B=3, seed=11, max_doc_chars=100)
    assert df.height == 3 * 7 * 4 and len(scorer.prompts) == 3 * 4 * 3  # ceil(7/3) = 3 prompts per presentation
    assert [len(d) for _, d in scorer.prompts[:3]] == [3, 3, 1]
    for (qid, pres), g in df.group_by("query_id", "presentation"):
        order = teacher_orders(7, seed=11, dataset="ds", query_id=qid, T=3)[pres]
        for pos, i in enumerate(order):
            score = g.filter(pl.col("doc_id") == f"{qid}-d{i}")["score"][0]
            assert score == i + 10 * (pos % 3)
    q0 = df.filter(pl.col("query_id") == "q0")
    # presentation 0 is the first-stage order: the single-order label
    assert q0.filter(pl.col("presentation") == 0).sort("doc_id")["score"].to_list() == [i + 10 * (i % 3) for i in range(7)]
    mean = q0.filter(pl.col("presentation") >= 1).group_by("doc_id").agg(pl.col("score").mean().alias("m"), pl.col("label").first())
    assert (mean["m"] - mean["label"]).abs().max() < 1e-12
    # shuffles are the stable ones, disjoint from the evaluation seeds
    assert teacher_orders(7, seed=11, dataset="ds", query_id="q0", T=3)[2] == random_shuffle(
        list(range(7)), stable_seed(11, "ds", "q0", "teacher", 2))
    assert teacher_orders(7, seed=11, dataset="ds", query_id="q0", T=3)[0] == list(range(7))


def test_failed_prompts_give_null_scores_and_labels_ignore_them():
    def run(prompts):
        return [None if k % 2 else [1.0] * len(d) for k, (_, d) in enumerate(prompts)]

    df = silver_labels(candidates(1, 2), run, teacher="t", dataset="ds", T=3, B=2, seed=1, max_doc_chars=None)
    # prompts: pres 0..3, one each; odd ones (1 and 3) fail
    assert df.filter(pl.col("presentation").is_in([1, 3]))["score"].null_count() == 4
    assert df["label"].to_list() == [1.0] * 8
    all_fail = silver_labels(candidates(1, 2), lambda p: [None] * len(p), teacher="t", dataset="ds", T=2, B=2,
                             seed=1, max_doc_chars=None)
    assert all_fail["label"].null_count() == all_fail.height


def test_mock_hosted_teacher_file_is_labelled(tmp_path):
    cp = tmp_path / "c.parquet"
    write_table(candidates(2, 4), cp, "candidates")
    out = tmp_path / "silver" / "mock" / "ds.parquet"
    silver_labels_files(candidates_path=cp, out_path=out, teacher="mock", dataset="ds", B=2, seed=3, max_doc_chars=50,
                        teacher_spec={"kind": "hosted", "provider": "mock", "model": "grader", "T": 2},
                        cache_dir=tmp_path / "cache")
    df = read_table(out, "silver")
    meta = read_metadata(out)
    assert meta["mock"] is True and "MOCK" in meta["note"] and meta["teacher_spec"]["provider"] == "mock"
    assert df.height == 2 * 4 * 3 and df["score"].null_count() == 0
    assert set(df["score"].to_list()) <= {0.0, 1.0, 2.0, 3.0}


def test_open_weight_teacher_on_a_tiny_model(tmp_path, smollm2_model_dir):
    from transformers import AutoTokenizer

    from presdep.training.lora import tiny_causal_lm
    from presdep.training.readout_grad import ReadoutScorer

    tok = AutoTokenizer.from_pretrained(smollm2_model_dir)
    scorer = ReadoutScorer(tiny_causal_lm(tok, 1), tok, max_doc_chars=50)
    cp = tmp_path / "c.parquet"
    write_table(candidates(2, 3), cp, "candidates")
    out = tmp_path / "s.parquet"
    df = silver_labels_files(candidates_path=cp, out_path=out, teacher="self", dataset="ds", B=2, seed=3,
                             max_doc_chars=50, teacher_spec={"kind": "open_weight", "model": "tiny", "T": 2},
                             scorer=scorer)
    meta = read_metadata(out)
    assert meta["template_sha256"] == scorer.template_sha256 and meta["mock"] is False and meta["T"] == 2
    assert df["score"].null_count() == 0 and df["score"].is_between(0.0, 3.0).all()
    # the single-order score equals a direct readout of the first-stage chunk
    g = candidates(2, 3).filter(pl.col("query_id") == "q1")
    direct = scorer.score(g["query"][0], g["doc"].to_list()[:2])
    got = df.filter((pl.col("query_id") == "q1") & (pl.col("presentation") == 0)).sort("doc_id")["score"].to_list()[:2]
    assert got == pytest.approx([r.score for r in direct], abs=1e-6)
    with pytest.raises(ValueError, match="kind"):
        silver_labels_files(candidates_path=cp, out_path=out, teacher="x", dataset="ds", B=2, seed=3, max_doc_chars=50,
                            teacher_spec={"kind": "nope"})
