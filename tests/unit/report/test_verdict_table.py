"""The verdict table: seed means per row and collection, the verdict flip per seed and its sample SD
over seeds, and the Markdown a reader sees."""

from __future__ import annotations

import statistics

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.contracts.schemas import write_table
from presdep.report.verdict_table import write_verdict_table


def _metrics(variant, seed, flip, claims=10, spread=()):
    rows = [("verdict_flip", flip), ("verdict_canonical_accuracy", 0.5), ("verdict_mean_accuracy", 0.4),
            ("verdict_invalid_rate", 0.1), ("verdict_evidence_in_topk", 0.8), ("verdict_evidence_slot_mean", 1.5),
            ("verdict_evidence_slot_var", None), ("verdict_claims", float(claims)), ("verdict_excluded_disputed", 2.0),
            *spread]
    return pl.DataFrame({"dataset": "climate-fever", "task": "verdict", "variant": variant, "seed": seed,
                         "perturbation": "random_shuffle", "query_id": None, "metric": [m for m, _ in rows],
                         "value": [v for _, v in rows]},
                        schema_overrides={"seed": pl.Int32, "query_id": pl.String, "value": pl.Float64})


SPEC = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
        "bsc_ensembles": 4}
VARIANTS = {"base": Variant.checked({**SPEC, "label": "Off the shelf"}, "base"),
            "oc_sft": Variant.checked({**SPEC, "label": "OC-SFT"}, "oc_sft")}


def test_seed_means_and_markdown(tmp_path):
    paths = []
    for i, (variant, seed, flip) in enumerate([("oc_sft", 42, 0.1), ("oc_sft", 43, 0.3), ("base", None, 0.5)]):
        paths.append(write_table(_metrics(variant, seed, flip), tmp_path / f"m{i}.parquet", "metrics"))
    table = write_verdict_table(paths, VARIANTS, tmp_path / "v.csv", tmp_path / "v.md", k=5)
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
            "| 2.50 | - |") in md  # the CSV's 0-based mean slot 1.5, read from 1
    assert "| Off the shelf | climate-fever | 10 | 0.500 | - | none: 0.500 |" in md
    assert "evidence in top 5" in md and "climate-fever: 2" in md and "numbered from 1" in md
    assert pl.read_csv(tmp_path / "v.csv").height == 2


OLD_COLUMNS = ["label", "dataset", "perturbation", "seeds", "claims", "disputed_excluded", "verdict_flip",
               "canonical_accuracy", "mean_accuracy", "invalid_rate", "evidence_in_topk", "evidence_slot_mean",
               "evidence_slot_var", "verdict_flip_sd", "verdict_flip_by_seed"]


def test_accuracy_spread_per_seed(tmp_path):
    runs = [("oc_sft", 42, 0.30, 0.40), ("oc_sft", 43, 0.20, 0.60), ("oc_sft", 44, 0.25, 0.50),
            ("base", None, 0.35, 0.70)]
    paths = [write_table(_metrics(variant, seed, 0.1, spread=[("verdict_accuracy_spread", sd),
                                                              ("verdict_order_dependent_share", share)]),
                         tmp_path / f"m{i}.parquet", "metrics")
             for i, (variant, seed, sd, share) in enumerate(runs)]
    table = write_verdict_table(paths, VARIANTS, tmp_path / "v.csv", tmp_path / "v.md", k=5)
    oc = table.row(1, named=True)
    assert oc["accuracy_spread"] == pytest.approx(0.25)  # mean over seeds
    assert oc["accuracy_spread_sd"] == pytest.approx(statistics.stdev([0.30, 0.20, 0.25]))
    assert oc["accuracy_spread_by_seed"] == "42: 0.300000; 43: 0.200000; 44: 0.250000"
    assert oc["order_dependent_share"] == pytest.approx(0.5)
    assert oc["order_dependent_share_sd"] == pytest.approx(statistics.stdev([0.4, 0.6, 0.5]))
    assert oc["order_dependent_share_by_seed"] == "42: 0.400000; 43: 0.600000; 44: 0.500000"
    base = table.row(0, named=True)
    assert base["accuracy_spread_sd"] is None and base["order_dependent_share_by_seed"] == "none: 0.700000"
    header = pl.read_csv(tmp_path / "v.csv").columns
    assert header[:len(OLD_COLUMNS)] == OLD_COLUMNS  # the older columns keep their names and order
    assert "accuracy_spread_sd" in header and "order_dependent_share_by_seed" in header
    md = (tmp_path / "v.md").read_text(encoding="utf-8")
    assert "| accuracy spread | spread SD | spread per seed | order-dependent |" in md
    assert ("| 2.50 | - | 0.250 | 0.050 | 42: 0.300; 43: 0.200; 44: 0.250 | 0.500 | 0.100 "
            "| 42: 0.400; 43: 0.600; 44: 0.500 |") in md
    base_line = next(line for line in md.splitlines() if line.startswith("| Off the shelf |"))
    assert base_line.endswith("| 0.350 | - | none: 0.350 | 0.700 | - | none: 0.700 |")
