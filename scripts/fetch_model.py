"""Snakemake adapter: rule fetch_model -> presdep.runtime.models.fetch_model."""
from presdep.runtime.logs import log_to_file
from presdep.runtime.models import fetch_model

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
fetch_model(snakemake.params.spec, snakemake.output.model_dir)  # noqa: F821
