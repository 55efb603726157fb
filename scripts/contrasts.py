"""Snakemake adapter: every metrics file -> results/contrasts.{csv,md}."""
from presdep.config.records import Variant
from presdep.report.contrasts import Settings, write_contrasts
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
s = p.settings
write_contrasts(
    list(snakemake.input.metrics),  # noqa: F821
    {name: Variant.from_spec(name, spec) for name, spec in p.variants.items()},
    snakemake.output.csv,  # noqa: F821
    snakemake.output.md,  # noqa: F821
    pairs=s["pairs"],
    base=s["base"],
    settings=Settings.from_config(s),
    ceiling=s["ceiling"],
    shared_permutations=p.shared_permutations,
)
