"""export-trec: each presentation as a TREC run that pytrec_eval (an independent reader) ranks
exactly as presdep does, ties included, so its nDCG equals the metrics file's."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import polars as pl
import pytest
import pytrec_eval
from scorers_tiny import VARIANT, fixture, score_then_metrics

from presdep.cli import main as presdep_main
from presdep.contracts.readouts import GradeReadout
from presdep.data.trec import read_run


class TiedScorer:
    """Integer scores from the text and the slot: many ties, broken by presented position."""

    name = "tied"
    template_sha256 = None

    def describe(self):
        return {"scorer": self.name}

    def score_prompts(self, prompts):
        return [[GradeReadout(float((len(d) + s) % 3), None) for s, d in enumerate(docs)] for _, docs in prompts]


def _ndcg10(run_path, qrels):
    run = defaultdict(dict)
    for r in read_run(run_path).iter_rows(named=True):
        run[r["query_id"]][r["doc_id"]] = float(r["score"])
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    return {q: v["ndcg_cut_10"] for q, v in ev.evaluate(dict(run)).items()}


def test_exported_runs_give_the_metrics_ndcg_through_pytrec_eval(tmp_path):
    proto = {"seed": 13, "M": 3, "B": 3, "perturbations": ["random_shuffle", "within_chunk"], "max_doc_chars": 200}
    scores, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "tied"}, proto, "rerank",
                                         scorer=TiedScorer(), n_docs=6)
    assert presdep_main(["export-trec", str(tmp_path / "scores.parquet"), "--out", str(tmp_path / "runs")]) == 0
    names = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert names == ["first_stage-000.run", *(f"random_shuffle-{m:03d}.run" for m in range(3)),
                     *(f"within_chunk-{m:03d}.run" for m in range(3))]
    _, qrels_df = fixture(4, 6)
    qrels = defaultdict(dict)
    for q, d, g in qrels_df.iter_rows():
        qrels[q][d] = int(g)
    qrels = dict(qrels)

    def metric(pert, name):
        rows = metrics.filter((pl.col("perturbation") == pert) & (pl.col("metric") == name)
                              & pl.col("query_id").is_not_null())
        return dict(zip(rows["query_id"], rows["value"]))

    assert _ndcg10(tmp_path / "runs" / "first_stage-000.run", qrels) == pytest.approx(metric("first_stage", "ndcg@10"))
    per = [_ndcg10(tmp_path / "runs" / f"random_shuffle-{m:03d}.run", qrels) for m in range(3)]
    mean = {q: float(np.mean([p[q] for p in per])) for q in per[0]}
    assert mean == pytest.approx(metric("random_shuffle", "ndcg10_shuffle_mean"))
    # The strict score column follows presdep's order: ties to the document shown first.
    run = read_run(tmp_path / "runs" / "random_shuffle-001.run").filter(pl.col("query_id") == "q0").sort("rank")
    shown = scores.filter((pl.col("perturbation") == "random_shuffle") & (pl.col("presentation") == 1)
                          & (pl.col("query_id") == "q0")).sort([pl.col("score"), "position"], descending=[True, False])
    assert run["doc_id"].to_list() == shown["doc_id"].to_list()
    assert run["score"].to_list() == [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]


def test_raw_scores_and_a_named_tag(tmp_path):
    proto = {"seed": 13, "M": 2, "B": 6, "perturbations": ["random_shuffle"], "max_doc_chars": 200}
    scores, _ = score_then_metrics(tmp_path, {**VARIANT, "scorer": "tied"}, proto, "rerank", scorer=TiedScorer())
    assert presdep_main(["export-trec", str(tmp_path / "scores.parquet"), "--out", str(tmp_path / "raw"),
                         "--raw-scores", "--tag", "mine"]) == 0
    line = (tmp_path / "raw" / "random_shuffle-000.run").read_text().splitlines()[0].split()
    assert line[1] == "Q0" and line[3] == "1" and line[5] == "mine-random_shuffle-0"
    assert float(line[4]) in {0.0, 1.0, 2.0}


def test_a_missing_scores_file_is_a_clear_error(tmp_path, capsys):
    assert presdep_main(["export-trec", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "o")]) == 2
    assert "nope.parquet" in capsys.readouterr().err
