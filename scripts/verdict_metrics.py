"""Snakemake adapter: one verdicts file -> its verdict metrics."""
from presdep.metrics.verdicts import verdict_metrics_files
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
verdict_metrics_files(
    snakemake.input.verdicts,  # noqa: F821
    snakemake.output.metrics,  # noqa: F821
    dataset=snakemake.wildcards.dataset,  # noqa: F821
    variant=snakemake.params.variant,  # noqa: F821
    seed=snakemake.params.seed,  # noqa: F821
)
