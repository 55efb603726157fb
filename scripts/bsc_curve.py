"""Snakemake adapter: BSC's K-curve (results/bsc_curve.csv) from every metrics file."""
from presdep.report.tables import write_bsc_curve
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])
write_bsc_curve(snakemake.input.metrics, snakemake.output.csv)
