"""Snakemake adapter: every matched-retention file and metrics file -> results/matched_retention.{csv,md}."""
from presdep.config.records import Variant
from presdep.report.matched_retention import write_matched_retention
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
write_matched_retention(
    list(snakemake.input.matched),  # noqa: F821
    list(snakemake.input.metrics),  # noqa: F821
    {name: Variant.from_spec(name, spec) for name, spec in snakemake.params.variants.items()},  # noqa: F821
    snakemake.output.csv,  # noqa: F821
    snakemake.output.md,  # noqa: F821
)
