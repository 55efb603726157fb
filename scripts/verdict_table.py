"""Snakemake adapter: every verdict metrics file -> results/verdict_flip.{csv,md}."""
from presdep.config.records import Variant
from presdep.report.verdict_table import write_verdict_table
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
write_verdict_table(
    list(snakemake.input.metrics),  # noqa: F821
    {name: Variant.from_spec(name, spec) for name, spec in p.variants.items()},
    snakemake.output.csv,  # noqa: F821
    snakemake.output.md,  # noqa: F821
    k=p.k,
)
