"""Snakemake adapter: choose lambda (and checkpoint) of a trained variant on the held-out split."""
from presdep.logs import log_to_file
from presdep.training.select import select_lambda_files

log_to_file(snakemake.log[0])
select_lambda_files(runs=snakemake.params.runs, out_path=snakemake.output.selected, params=snakemake.params.meta,
                    **snakemake.params.selection)
