"""Snakemake adapter: every pool metrics file -> results/pool_perturbation.{csv,md}, pool_contrasts.csv."""
from presdep.config.records import Variant
from presdep.report.pool_table import PoolTableSettings, runs_by_label, write_pool_table
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
variants = {name: Variant.from_spec(name, spec) for name, spec in p.variants.items()}
write_pool_table(
    runs_by_label(list(snakemake.input.metrics), variants),  # noqa: F821
    means_csv=snakemake.output.csv,  # noqa: F821
    markdown=snakemake.output.md,  # noqa: F821
    contrasts_csv=snakemake.output.contrasts,  # noqa: F821
    pairs=[tuple(pair) for pair in p.pairs],
    settings=PoolTableSettings(resamples=p.resamples, seed=p.seed),
)
