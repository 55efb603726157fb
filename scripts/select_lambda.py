"""Snakemake adapter: choose lambda (and checkpoint) of a trained variant on the held-out split."""
from presdep.runtime.logs import log_to_file
from presdep.training.select import select_lambda_files

log_to_file(snakemake.log[0])
select_lambda_files(runs=snakemake.params.runs, out_path=snakemake.output.selected, params={"presdep_version": snakemake.params.version, "student": snakemake.params.student},
                    **snakemake.params.selection)
