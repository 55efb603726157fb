"""Snakemake adapter: rule fetch_model -> presdep.models.fetch_model."""
from presdep.logs import log_to_file
from presdep.models import fetch_model

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
fetch_model(snakemake.params.spec, snakemake.output.model_dir)  # noqa: F821
