"""The contrasts job refuses a base that names no row instead of writing an empty table."""

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.contracts.errors import InvalidInput
from presdep.report.contrasts import Settings, contrast_table

_ROW = {"scorer": "transformers", "model": "m", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
        "bsc_ensembles": 4, "tasks": ["rerank"]}
_STUDENT = {"teacher": "t", "train": "tr", "heldout": "ho", "seeds": [1], "device": "cpu", "lambda": 1.0,
            "objective": "single_order"}
VARIANTS = {"off_the_shelf": Variant.checked({**_ROW, "label": "Off the shelf"}, "off_the_shelf"),
            "so": Variant.checked({**_ROW, "label": "Single-order", "student": _STUDENT}, "so")}
NO_METRICS = pl.DataFrame(schema={"variant": pl.String, "task": pl.String, "metric": pl.String,
                                  "perturbation": pl.String, "query_id": pl.String, "value": pl.Float64,
                                  "seed": pl.Int64, "dataset": pl.String})


def test_a_base_that_is_no_variant_is_an_error_naming_the_key():
    with pytest.raises(InvalidInput, match=r"contrasts.base: 'off_the_shelff' is not a Table 1 variant"):
        contrast_table(NO_METRICS, VARIANTS, "paper", "off_the_shelff", Settings(resamples=100))

