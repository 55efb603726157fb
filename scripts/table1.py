"""Snakemake adapter: assemble Table 1."""
from presdep.logs import log_to_file
from presdep.tables import write_table1

log_to_file(snakemake.log[0])
write_table1(
    snakemake.input.metrics,
    snakemake.params.variants,
    snakemake.output.csv,
    snakemake.output.md,
    snakemake.output.counts,
    snakemake.output.bsc_curve,
    skipped_datasets=snakemake.params.skipped_datasets,
)
