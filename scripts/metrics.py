"""Snakemake adapter: metrics of one (variant, dataset)."""
from presdep.metrics.compute import metrics_from_files
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])
metrics_from_files(
    scores_path=snakemake.input.scores,
    qrels_path=snakemake.input.qrels,
    out_path=snakemake.output.metrics,
    ledger_path=snakemake.output.ledger,
    dataset=snakemake.wildcards.dataset,
    task=snakemake.params.task,
    variant=snakemake.params.variant,
    seed=snakemake.params.seed,
    answers_path=snakemake.input.get("answers"),
    gold_path=snakemake.input.get("gold"),
    thresholds_path=snakemake.input.get("thresholds"),
    bsc_k=snakemake.params.bsc_k,
    ensembles=snakemake.params.bsc_ensembles,
)
