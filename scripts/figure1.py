"""Snakemake adapter: Figure 1 (one query in two presentations; variants by nDCG@10 and Jaccard)."""
from presdep.report.figures import figure1_from_files
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])
figure1_from_files(
    list(snakemake.input.metrics),
    snakemake.input.scores,
    snakemake.input.qrels,
    snakemake.input.thresholds,
    snakemake.output.svg,
    snakemake.output.png,
    example_metrics_path=snakemake.input.example_metrics,
    variant=snakemake.params.variant,
    dataset=snakemake.params.dataset,
    labels=snakemake.params.labels,
)
