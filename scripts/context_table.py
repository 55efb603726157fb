"""Snakemake adapter: every context metrics file -> results/context_decomposition.{csv,md}."""
from presdep.config.records import Variant
from presdep.report.context_table import ContextTableSettings, write_context_table
from presdep.report.pool_table import runs_by_label
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
variants = {name: Variant.from_spec(name, spec) for name, spec in p.variants.items()}
write_context_table(
    runs_by_label(list(snakemake.input.metrics), variants),  # noqa: F821
    csv=snakemake.output.csv,  # noqa: F821
    markdown=snakemake.output.md,  # noqa: F821
    settings=ContextTableSettings(resamples=p.resamples, seed=p.seed),
)
