"""Snakemake adapter: assemble Table 1 (table1.csv, table1.md, table1_counts.csv)."""
from presdep.config.records import Variant
from presdep.report.tables import write_table1
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
write_table1(
    snakemake.input.metrics,  # noqa: F821
    {name: Variant.from_spec(name, spec) for name, spec in p.variants.items()},
    snakemake.output.csv,  # noqa: F821
    snakemake.output.md,  # noqa: F821
    snakemake.output.counts,  # noqa: F821
    skipped_datasets=p.skipped_datasets,
    departures=p.departures,
)
