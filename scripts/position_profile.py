"""Snakemake adapter: the position profile figure (every run's slot profile side by side)."""
from presdep.report.position_figure import position_figure_from_files
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])
position_figure_from_files(list(snakemake.input.metrics), snakemake.params.labels,
                           snakemake.output.svg, snakemake.output.png)
