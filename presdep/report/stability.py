"""Statistical stability of the Table 1 leaderboard: paired bootstrap rank intervals.

This module gathers the public names of the analysis under one import path; each
lives in the module that owns it:

* presdep.report.bootstrap           the resampling and rank statistics on arrays (numpy only)
* presdep.report.stability_analysis  per-query rows -> the per-column result dict (JSON layout)
* presdep.report.rank_sensitivity    ranks per presentation and per prompt variant
* presdep.report.stability_io        metrics files and run reports in, JSON and SVG out
* presdep.report.metric_columns      the per-query rows of one Table 1 column
* presdep.report.errors              StabilityError (and ReportError)
"""

from __future__ import annotations

from presdep.contracts.columns import TABLE1_COLUMNS, Table1Column
from presdep.report.bootstrap import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_RESAMPLES,
    MIN_SHARED_ITEMS,
    kendall_tau_b,
)
from presdep.report.errors import StabilityError
from presdep.report.metric_columns import column_values
from presdep.report.rank_sensitivity import presentation_sensitivity, prompt_sensitivity
from presdep.report.stability_analysis import (
    NO_PRESENTATION_REASON,
    NO_PROMPT_VARIANT_REASON,
    analyse_column,
    analyse_table1,
    paired_bootstrap,
)
from presdep.report.stability_io import (
    analyse_reports,
    read_metrics,
    write_stability_json,
    write_table1_stability,
)

__all__ = [
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "MIN_RESAMPLES",
    "MIN_SHARED_ITEMS",
    "NO_PRESENTATION_REASON",
    "NO_PROMPT_VARIANT_REASON",
    "TABLE1_COLUMNS",
    "StabilityError",
    "Table1Column",
    "analyse_column",
    "analyse_reports",
    "analyse_table1",
    "column_values",
    "kendall_tau_b",
    "paired_bootstrap",
    "presentation_sensitivity",
    "prompt_sensitivity",
    "read_metrics",
    "write_stability_json",
    "write_table1_stability",
]
