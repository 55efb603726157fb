"""Snakemake adapter: the reranking threshold artifact of one (run, dataset)."""
from presdep.metrics.thresholds import thresholds_from_files
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])
thresholds_from_files(
    snakemake.input.scores,
    snakemake.input.qrels,
    snakemake.output.json,
    split_seed=snakemake.params.split_seed,
    bsc_k=snakemake.params.bsc_k,
    ensembles=snakemake.params.bsc_ensembles,
)
