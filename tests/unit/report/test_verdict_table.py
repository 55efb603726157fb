"""The verdict table: seed means per row and collection, the verdict flip per seed and its sample SD
over seeds, and the Markdown a reader sees."""

from __future__ import annotations

import statistics

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.contracts.schemas import write_table
from presdep.report.verdict_table import write_verdict_table


def _metrics(variant, seed, flip, claims=10):
    rows = [("verdict_flip", flip), ("verdict_canonical_accuracy", 0.5), ("verdict_mean_accuracy", 0.4),
            ("verdict_invalid_rate", 0.1), ("verdict_evidence_in_topk", 0.8), ("verdict_evidence_slot_mean", 1.5),
            ("verdict_evidence_slot_var", None), ("verdict_claims", float(claims)), ("verdict_excluded_disputed", 2.0)]
    return pl.DataFrame({"dataset": "climate-fever", "task": "verdict", "variant": variant, "seed": seed,
                         "perturbation": "random_shuffle", "query_id": None, "metric": [m for m, _ in rows],
                         "value": [v for _, v in rows]},
                        schema_overrides={"seed": pl.Int32, "query_id": pl.String, "value": pl.Float64})


def test_seed_means_and_markdown(tmp_path):
    paths = []
    for i, (variant, seed, flip) in enumerate([("oc_sft", 42, 0.1), ("oc_sft", 43, 0.3), ("base", None, 0.5)]):
        paths.append(write_table(_metrics(variant, seed, flip), tmp_path / f"m{i}.parquet", "metrics"))
    spec = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
            "bsc_ensembles": 4}
    variants = {"base": Variant.checked({**spec, "label": "Off the shelf"}, "base"),
                "oc_sft": Variant.checked({**spec, "label": "OC-SFT"}, "oc_sft")}
    table = write_verdict_table(paths, variants, tmp_path / "v.csv", tmp_path / "v.md", k=5)
    assert table["label"].to_list() == ["Off the shelf", "OC-SFT"]  # config order
    oc = table.row(1, named=True)
    assert oc["verdict_flip"] == pytest.approx(0.2) and oc["seeds"] == 2 and oc["claims"] == 10
    assert oc["evidence_slot_var"] is None and oc["disputed_excluded"] == 2
    assert oc["verdict_flip_sd"] == pytest.approx(statistics.stdev([0.1, 0.3]))  # sample SD over seeds
    assert oc["verdict_flip_by_seed"] == "42: 0.100000; 43: 0.300000"
    base = table.row(0, named=True)
    assert base["verdict_flip_sd"] is None and base["verdict_flip_by_seed"] == "none: 0.500000"  # one, unseeded
    md = (tmp_path / "v.md").read_text(encoding="utf-8")
    assert ("| OC-SFT | climate-fever | 10 | 0.200 | 0.141 | 42: 0.100; 43: 0.300 | 0.500 | 0.400 | 0.100 | 0.800 "
            "| 1.50 | - |") in md
    assert "| Off the shelf | climate-fever | 10 | 0.500 | - | none: 0.500 |" in md
    assert "evidence in top 5" in md and "climate-fever: 2" in md
    assert pl.read_csv(tmp_path / "v.csv").height == 2
