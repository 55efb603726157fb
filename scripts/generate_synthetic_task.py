"""Snakemake adapter: one split of a synthetic QA or response set."""
from presdep.data.synthetic_tasks import write_from_config
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
write_from_config(snakemake.params.spec, snakemake.wildcards.split, snakemake.output[0])  # noqa: F821
