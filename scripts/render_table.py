"""Snakemake adapter: every render metrics file -> results/render_perturbations.{csv,md}."""
from presdep.config.records import Variant
from presdep.report.render_table import runs_by_label, write_render_table
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
variants = {name: Variant.from_spec(name, spec) for name, spec in snakemake.params.variants.items()}  # noqa: F821
write_render_table(runs_by_label(list(snakemake.input.metrics), variants),  # noqa: F821
                   csv=snakemake.output.csv, markdown=snakemake.output.md)  # noqa: F821
