"""Snakemake adapter: every metrics file -> results/discordance.{csv,md}."""
from presdep.config.records import Variant
from presdep.report.discordance import write_discordance
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
write_discordance(
    list(snakemake.input.metrics),  # noqa: F821
    {name: Variant.from_spec(name, spec) for name, spec in p.variants.items()},
    snakemake.output.csv,  # noqa: F821
    snakemake.output.md,  # noqa: F821
    rows=p.settings.get("rows"),
)
