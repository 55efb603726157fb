"""JSON run reports: strict validation, repeated runs as seeds, -vN clusters, export round trip."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.report.metric_columns import column_values
from presdep.report.run_reports import (
    ReportError,
    export_report,
    prompt_variant,
    read_report,
    reports_frame,
    task_cluster,
)


def dump(path, obj):
    path.write_text(json.dumps(obj))
    return path


def test_task_cluster():
    assert task_cluster("q17-v2") == "q17"
    assert task_cluster("a-b-v10") == "a-b"
    assert task_cluster("q17") == "q17"
    assert task_cluster("q-v") == "q-v"
    assert task_cluster("-v1") == "-v1"  # no base left: not a variant suffix


def test_prompt_variant():
    assert prompt_variant("q17-v2") == "v2"
    assert prompt_variant("a-b-v10") == "v10"
    assert prompt_variant("q17") is None and prompt_variant("-v1") is None and prompt_variant("q-v") is None


def test_summary_object_is_allowed_and_checked(tmp_path):
    ok = dump(tmp_path / "ok.json", {"model": "m", "summary": {"mean": 0.5}, "tasks": [{"id": "a", "score": 0.5}]})
    assert read_report(ok).tasks == [("report", "a", 0.5)]
    bad = dump(tmp_path / "bad.json", {"model": "m", "summary": [1], "tasks": [{"id": "a", "score": 0.5}]})
    with pytest.raises(ReportError, match="bad.json: 'summary' must be an object, got list"):
        read_report(bad)


@pytest.mark.parametrize(
    "obj, message",
    [
        ([1, 2], "top level must be an object"),
        ({"tasks": [{"id": "a", "score": 0.1}]}, r"missing required key\(s\) \['model'\]"),
        ({"model": "", "tasks": [{"id": "a", "score": 0.1}]}, "'model' must be a non-empty string"),
        ({"model": "m", "tasks": []}, "'tasks' must be a non-empty list"),
        ({"model": "m", "tasks": [{"id": "a", "score": 0.1}], "extra": 1}, r"unknown key\(s\) \['extra'\]"),
        ({"model": "m", "tasks": [{"id": "a", "score": 1.5}]}, r"tasks\[0\] \(id 'a'\): 'score' must lie in \[0, 1\]"),
        ({"model": "m", "tasks": [{"id": "a", "score": True}]}, "'score' must be a number"),
        ({"model": "m", "tasks": [{"id": "a", "score": "0.3"}]}, "'score' must be a number"),
        ({"model": "m", "tasks": [{"id": "a"}]}, r"tasks\[0\].*lacks key\(s\) \['score'\]"),
        ({"model": "m", "tasks": [{"id": "", "score": 0.1}]}, "'id' must be a non-empty string"),
        ({"model": "m", "tasks": [{"id": "a", "score": 0.1, "note": "x"}]}, r"tasks\[0\] has unknown key\(s\) \['note'\]"),
        ({"model": "m", "tasks": [{"id": "a", "score": 0.1}, {"id": "a", "score": 0.2}]},
         r"tasks\[1\]: duplicate task id 'a'.*first at tasks\[0\]"),
        ({"model": "m", "seed": 1.5, "tasks": [{"id": "a", "score": 0.1}]}, "'seed' must be an integer"),
        ({"model": "m", "higherIsBetter": "yes", "tasks": [{"id": "a", "score": 0.1}]}, "'higherIsBetter'"),
    ],
)
def test_validation_names_file_and_entry(tmp_path, obj, message):
    path = dump(tmp_path / "run.json", obj)
    with pytest.raises(ReportError, match=message) as exc:
        read_report(path)
    assert str(path) in str(exc.value)


def test_not_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{model: ")
    with pytest.raises(ReportError, match="broken.json: not valid JSON"):
        read_report(path)
    (tmp_path / "nan.json").write_text('{"model": "m", "tasks": [{"id": "a", "score": NaN}]}')
    with pytest.raises(ReportError, match="must lie in"):
        read_report(tmp_path / "nan.json")


def test_repeated_runs_become_seeds_and_clusters(tmp_path):
    tasks = [{"id": f"t{i}-v{k}", "score": 0.1 * k} for i in range(3) for k in (1, 2)]
    dump(tmp_path / "a1.json", {"model": "A", "tasks": tasks})
    dump(tmp_path / "a2.json", {"model": "A", "tasks": tasks})
    dump(tmp_path / "b.json", {"model": "B", "tasks": tasks + [{"id": "extra", "score": 1}]})
    df, direction = reports_frame(sorted(tmp_path.glob("*.json")))
    assert direction is None
    runs = df.select("variant", "seed").unique().sort("variant", "seed", nulls_last=True).rows()
    assert runs == [("A", 0), ("A", 1), ("B", None)]
    t = df.filter(pl.col("query_id") == "t2-v1").row(0, named=True)
    assert t["cluster"] == "t2" and t["dataset"] == "report"


def test_seed_conflicts_and_direction_conflicts(tmp_path):
    t = [{"id": "a", "score": 0.2}]
    p1 = dump(tmp_path / "1.json", {"model": "A", "seed": 3, "tasks": t})
    p2 = dump(tmp_path / "2.json", {"model": "A", "seed": 3, "tasks": t})
    with pytest.raises(ReportError, match="seed 3 appears in both"):
        reports_frame([p1, p2])
    p3 = dump(tmp_path / "3.json", {"model": "A", "tasks": t})
    with pytest.raises(ReportError, match="some reports state a seed"):
        reports_frame([p1, p3])
    p4 = dump(tmp_path / "4.json", {"model": "B", "higherIsBetter": True, "tasks": t})
    p5 = dump(tmp_path / "5.json", {"model": "C", "higherIsBetter": False, "tasks": t})
    with pytest.raises(ReportError, match="disagree on higherIsBetter"):
        reports_frame([p4, p5])


def test_export_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    spec = TABLE1_COLUMNS["qa_answer_flip"]
    rows = []
    for v, seeds in (("Off the shelf", [None]), ("OC-SFT", [0, 1])):
        for s in seeds:
            for ds in ("hotpot", "nq"):
                for q in range(4):
                    rows.append({"dataset": ds, "task": spec.task, "variant": v, "seed": s,
                                 "perturbation": spec.perturbation, "query_id": f"q{q}", "metric": spec.metric,
                                 "value": float(rng.uniform())})
    rows[0]["value"] = None  # undefined there: left out of the report
    metrics = pl.DataFrame(rows, schema_overrides={"seed": pl.Int32})
    paths = export_report(metrics, "qa_answer_flip", tmp_path)
    assert [p.name for p in paths] == ["OC-SFT-seed0.json", "OC-SFT-seed1.json", "Off_the_shelf.json"]
    doc = json.loads(paths[0].read_text())
    assert doc["higherIsBetter"] is False and doc["seed"] == 0 and doc["model"] == "OC-SFT"
    back, direction = reports_frame(paths)
    assert direction is False
    want = column_values(metrics, "qa_answer_flip").filter(pl.col("value").is_not_null())
    got = back.select("dataset", "variant", "seed", "query_id", "value")
    key = ["dataset", "variant", "seed", "query_id"]
    assert got.sort(key).equals(want.with_columns(pl.col("seed").cast(pl.Int64)).sort(key))


def test_export_rejects_scores_outside_unit_interval(tmp_path):
    spec = TABLE1_COLUMNS["rerank_ndcg10"]
    metrics = pl.DataFrame([{"dataset": "d", "task": spec.task, "variant": "v", "seed": None,
                             "perturbation": spec.perturbation, "query_id": "q1", "metric": spec.metric,
                             "value": 1.7}], schema_overrides={"seed": pl.Int32})
    with pytest.raises(ReportError, match=r"must lie in \[0, 1\].*q1"):
        export_report(metrics, "rerank_ndcg10", tmp_path)
