"""Snakemake adapter: metrics Parquet files -> results/stability/table1.json + one SVG per column."""

import sys

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 - injected by Snakemake

from presdep.report.stability_io import write_table1_stability  # noqa: E402

result = write_table1_stability(
    list(snakemake.input.metrics),  # noqa: F821
    snakemake.output.json,  # noqa: F821
    snakemake.output.svg_dir,  # noqa: F821
    resamples=snakemake.params.resamples,  # noqa: F821
    seed=snakemake.params.seed,  # noqa: F821
)
for column, res in result["columns"].items():
    for warning in res["warnings"]:
        print(f"{column}: warning: {warning}", file=sys.stderr)
for column, reason in result["skipped"].items():
    print(f"{column}: skipped: {reason}", file=sys.stderr)
