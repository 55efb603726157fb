"""Snakemake adapter: build a dataset's candidates and qrels Parquet."""
from presdep.candidates.fixtures import build_fixture
from presdep.config.records import Dataset, Protocol
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
build_fixture(
    Dataset.from_spec(snakemake.wildcards.dataset, p.dataset_config, Protocol.from_dict(p.protocol)),  # noqa: F821
    snakemake.output.candidates,  # noqa: F821
    snakemake.output.qrels,  # noqa: F821
    params={"presdep_version": p.version, "dataset": p.dataset_config, "seed": p.protocol["seed"]},
    first_stage=snakemake.input.get("first_stage"),  # noqa: F821
    out_gold=snakemake.output.gold,  # noqa: F821
)
