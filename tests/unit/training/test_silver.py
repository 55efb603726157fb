"""Silver labels: presentations, alignment by doc id, labels, the contract and metadata."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from fault_server import hosted_spec

from presdep.config.records import Protocol, Teacher
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.scoring import GradeReadout
from presdep.training.silver import silver_labels, silver_labels_files, teacher_orders


def protocol(**settings) -> Protocol:
    """A training dataset's protocol: silver labels read its B, seed and max_doc_chars."""
    return Protocol.checked({"M": 1, "perturbations": [], **settings})

REPO = Path(__file__).resolve().parents[3]


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


def _fisher_yates(n, seed):
    """METHODS.md: a uniform permutation by Fisher-Yates from PCG64(seed), written out independently."""
    import numpy as np

    rng, out = np.random.Generator(np.random.PCG64(seed)), list(range(n))
    for i in range(n - 1, 0, -1):
        j = int(rng.integers(0, i + 1))
        out[i], out[j] = out[j], out[i]
    return out


def _seed(*parts):
    """sha256 over the type-tagged canonical JSON of (base seed, dataset, query, 'teacher', t), first 8 bytes."""
    import hashlib
    import json

    enc = [{"int": p} if isinstance(p, int) else {"str": p} for p in parts]
    return int.from_bytes(hashlib.sha256(json.dumps(enc, separators=(",", ":"), sort_keys=True).encode()).digest()[:8],
                          "big")


def test_presentations_alignment_and_labels():
    scorer = SlotScorer()
    c = candidates()
    df = silver_labels(c, lambda p: [[r.score for r in ro] for ro in scorer.score_prompts(p)],
                       teacher="t", dataset="ds", T=3, B=3, seed=11, max_doc_chars=100)
    assert df.height == 3 * 7 * 3 and len(scorer.prompts) == 3 * 3 * 3  # ceil(7/3) = 3 prompts per shuffle
    assert [len(d) for _, d in scorer.prompts[:3]] == [3, 3, 1]
    for (qid, t), g in df.group_by("query_id", "presentation"):
        # shuffle t of the teacher: the stable seed tagged "teacher" (disjoint from evaluation shuffles)
        order = _fisher_yates(7, _seed(11, "ds", qid, "teacher", t))
        assert order == teacher_orders(7, seed=11, dataset="ds", query_id=qid, T=3)[t]
        for pos, i in enumerate(order):
            score = g.filter(pl.col("doc_id") == f"{qid}-d{i}")["score"][0]
            assert score == i + 10 * (pos % 3)
    assert teacher_orders(7, seed=11, dataset="ds", query_id="q0", T=3)[0] != list(range(7))
    assert _seed(11, "ds", "q0", "teacher", 0) != _seed(11, "ds", "q0", 0)  # not an evaluation seed
    # k1 = the score under shuffle 0, k10-style label = mean over the T shuffles (hand-computed per doc)
    q0 = df.filter(pl.col("query_id") == "q0")
    for i in range(7):
        d = q0.filter(pl.col("doc_id") == f"q0-d{i}")
        slots = [_fisher_yates(7, _seed(11, "ds", "q0", "teacher", t)).index(i) % 3 for t in range(3)]
        assert d["label_k1"].to_list() == [i + 10 * slots[0]] * 3
        assert d["label"].to_list() == pytest.approx([i + 10 * sum(slots) / 3] * 3, abs=1e-12)


def test_failed_prompts_give_null_scores_and_labels_ignore_them():
    def run(prompts):
        return [None if k % 2 else [1.0 + k] * len(d) for k, (_, d) in enumerate(prompts)]

    df = silver_labels(candidates(1, 2), run, teacher="t", dataset="ds", T=4, B=2, seed=1, max_doc_chars=None)
    # prompts: shuffles 0..3, one each; odd ones (1 and 3) fail
    assert df.filter(pl.col("presentation").is_in([1, 3]))["score"].null_count() == 4
    assert df["label"].to_list() == [(1.0 + 3.0) / 2] * 8 and df["label_k1"].to_list() == [1.0] * 8
    first_fails = silver_labels(candidates(1, 2), lambda p: [None if k == 0 else [2.0] * len(d)
                                                              for k, (_, d) in enumerate(p)],
                                teacher="t", dataset="ds", T=2, B=2, seed=1, max_doc_chars=None)
    assert first_fails["label_k1"].null_count() == first_fails.height and first_fails["label"].to_list() == [2.0] * 4
    all_fail = silver_labels(candidates(1, 2), lambda p: [None] * len(p), teacher="t", dataset="ds", T=2, B=2,
                             seed=1, max_doc_chars=None)
    assert all_fail["label"].null_count() == all_fail.height


def test_mock_hosted_teacher_file_is_labelled(tmp_path):
    cp = tmp_path / "c.parquet"
    write_table(candidates(2, 4), cp, "candidates")
    out = tmp_path / "silver" / "mock" / "ds.parquet"
    silver_labels_files(candidates_path=cp, out_path=out, dataset="ds", protocol=protocol(B=2, seed=3, max_doc_chars=50),
                        teacher=Teacher.checked("mock", {"kind": "hosted", "T": 2,
                                                         **hosted_spec(None, provider="mock", model="grader")}),
                        cache_dir=tmp_path / "cache")
    df = read_table(out, "silver")
    meta = read_metadata(out)
    assert meta["mock"] is True and "MOCK" in meta["note"] and meta["teacher_spec"]["provider"] == "mock"
    assert df.height == 2 * 4 * 2 and df["score"].null_count() == 0 and meta["parse_failures"] == 0
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
    df = silver_labels_files(candidates_path=cp, out_path=out, dataset="ds", protocol=protocol(B=2, seed=3, max_doc_chars=50),
                             teacher=Teacher.checked("self", {"kind": "open_weight", "model": "tiny", "T": 2}),
                             scorer=scorer)
    meta = read_metadata(out)
    assert meta["template_sha256"] == scorer.template_sha256 and meta["mock"] is False and meta["T"] == 2
    assert df["score"].null_count() == 0 and df["score"].is_between(0.0, 3.0).all()
    # the k1 label equals a direct readout of the first prompt of shuffle 0
    g = candidates(2, 3).filter(pl.col("query_id") == "q1")
    order = _fisher_yates(3, _seed(3, "ds", "q1", "teacher", 0))
    direct = scorer.score(g["query"][0], [g["doc"][i] for i in order[:2]])
    got = [df.filter(pl.col("doc_id") == f"q1-d{i}")["label_k1"][0] for i in order[:2]]
    assert got == pytest.approx([r.score for r in direct], abs=1e-6)
    with pytest.raises(ValueError, match="kind"):
        silver_labels_files(candidates_path=cp, out_path=out, dataset="ds", protocol=protocol(B=2, seed=3, max_doc_chars=50),
                            teacher=Teacher.checked("x", {"kind": "nope"}))


def test_open_weight_teacher_has_no_silent_fallback(tmp_path, monkeypatch):
    from presdep import scoring
    from presdep.scoring import backends
    from presdep.training.silver import make_open_weight_scorer

    def broken(run, prompt):
        raise ValueError(f"cannot load {run.model['path']}")

    monkeypatch.setattr(backends, "make_transformers", broken)
    with pytest.raises(ValueError, match="cannot load .*teacher-model"):  # the error itself, not another scorer
        make_open_weight_scorer(tmp_path / "teacher-model", max_doc_chars=50)
    monkeypatch.setattr(scoring, "REGISTRY", {k: v for k, v in scoring.REGISTRY.items() if k != "transformers"})
    with pytest.raises(RuntimeError, match="registers no 'transformers' scorer"):
        make_open_weight_scorer(tmp_path / "teacher-model", max_doc_chars=50)
