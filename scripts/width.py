"""Snakemake adapter: the width pairs' metrics files -> results/width.{csv,md}."""
from presdep.config.records import Variant
from presdep.report.width import write_width
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
write_width(
    list(snakemake.input.metrics),  # noqa: F821
    p.pairs,
    {name: Variant.from_spec(name, spec) for name, spec in p.variants.items()},
    snakemake.output.csv,  # noqa: F821
    snakemake.output.md,  # noqa: F821
    resamples=p.resamples,
    seed=p.seed,
)
