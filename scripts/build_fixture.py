"""Snakemake adapter: build a dataset's candidates and qrels Parquet."""
from presdep.fixtures import build_fixture
from presdep.logs import log_to_file

log_to_file(snakemake.log[0])
build_fixture(
    snakemake.wildcards.dataset,
    snakemake.params.dataset_config,
    snakemake.output.candidates,
    snakemake.output.qrels,
    params=snakemake.params.meta,
    first_stage=snakemake.input.get("first_stage"),
    out_gold=snakemake.output.gold,
    seed=snakemake.params.seed,
)
