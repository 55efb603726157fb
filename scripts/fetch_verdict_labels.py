"""Snakemake adapter: fetch one catalogue entry's claim verdicts."""
from presdep.data.verdict_labels import fetch_verdict_labels
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
fetch_verdict_labels(
    snakemake.wildcards.catalogue_id,  # noqa: F821
    snakemake.params.source,  # noqa: F821
    snakemake.output.labels,  # noqa: F821
    snakemake.output.manifest,  # noqa: F821
)
