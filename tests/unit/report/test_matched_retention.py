"""The matched-retention table (presdep.report.matched_retention): each form averaged like a Table 1
cell (datasets within a seed, then seeds), the matching error, untrained rows left out."""

from __future__ import annotations

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.report.matched_retention import matched_table, to_markdown

SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}


def _variants() -> dict[str, Variant]:
    base = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
            "bsc_ensembles": 4, "tasks": ["rerank"]}
    student = {"teacher": "t", "train": "tr", "heldout": "ho", "seeds": [1, 2], "device": "cpu", "lambda": 1.0}
    return {"ots": Variant.checked({**base, "label": "Off the shelf"}, "ots"),
            "oc": Variant.checked({**base, "label": "OC-SFT", "student": {**student, "objective": "oc_sft"}}, "oc")}


def test_forms_are_averaged_over_datasets_then_seeds():
    ref, met = [], []
    # seed 1: datasets a (0.2) and b (0.6) -> 0.4; seed 2: a (0.8) -> 0.8; the row: 0.6
    for d, seed, jac, flip in (("a", 1, 0.2, None), ("b", 1, 0.6, 0.5), ("a", 2, 0.8, 0.1)):
        ref += [(d, "rerank", "oc", seed, "matched_retention_reference", None, "jaccard", jac),
                (d, "rerank", "oc", seed, "matched_retention_reference", None, "set_flip", flip),
                (d, "rerank", "oc", seed, "matched_retention_reference", None, "target_retention", 0.5),
                (d, "rerank", "oc", seed, "matched_retention_reference", None, "dev_retention", 0.45)]
        met += [(d, "rerank", "oc", seed, "random_shuffle", None, "matched_jaccard", 1.0),
                (d, "rerank", "ots", None, "random_shuffle", None, "matched_jaccard", 0.3)]
    table = matched_table(pl.DataFrame(ref, schema=SCHEMA, orient="row"), pl.DataFrame(met, schema=SCHEMA, orient="row"),
                          _variants())
    assert table["label"].to_list() == ["OC-SFT"]  # the untrained row has no target
    row = table.row(0, named=True)
    assert row["jaccard"] == pytest.approx(0.6) and (row["datasets"], row["seeds"]) == (2, 2)
    # set flip undefined on a[seed 1]: seed 1 is b's 0.5 alone, seed 2 0.1 -> 0.3
    assert row["set_flip"] == pytest.approx(0.3) and row["retention_gap"] == pytest.approx(0.05)
    assert row["presdep_matched_jaccard"] == 1.0
    assert "| OC-SFT | 0.6000 | 0.3000 | 0.0500 | 1.0000 | undefined | 2 | 2 |" in to_markdown(table)
