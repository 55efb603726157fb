"""Snakemake adapter: one trained run's matched retention in the paper's form on one dataset."""
from presdep.metrics.matched_reference import reference_from_files
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
i, p = snakemake.input, snakemake.params  # noqa: F821
reference_from_files(
    i.scores, i.thresholds, i.ref_scores, i.ref_thresholds, snakemake.output.matched,  # noqa: F821
    dataset=snakemake.wildcards.dataset,  # noqa: F821
    variant=snakemake.wildcards.variant.split("/")[0],  # noqa: F821
    seed=p.seed, bsc_k=p.bsc_k, ensembles=p.bsc_ensembles,
)
