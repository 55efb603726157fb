"""Snakemake adapter: metrics Parquet files -> the stability JSON + one SVG per column.

Its warnings (fewer than 30 shared items, degenerate cells left out, skipped columns) go to
the log and, through log_to_file, to the console, where the user running the workflow sees them.
"""

import logging

from presdep.report.stability_io import write_table1_stability
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
log = logging.getLogger("presdep.stability")
result = write_table1_stability(
    list(snakemake.input.metrics),  # noqa: F821
    snakemake.output.json,  # noqa: F821
    snakemake.output.svg_dir,  # noqa: F821
    resamples=snakemake.params.resamples,  # noqa: F821
    seed=snakemake.params.seed,  # noqa: F821
    labels=snakemake.params.labels,  # noqa: F821
    shared_permutations=snakemake.params.shared_permutations,  # noqa: F821
)
for column, res in result["columns"].items():
    for warning in res["warnings"]:
        log.warning("%s: %s", column, warning)
for column, reason in result["skipped"].items():
    log.warning("%s: skipped: %s", column, reason)
