"""Snakemake adapter: build a dataset's candidates and qrels Parquet."""
from presdep.candidates.fixtures import build_fixture
from presdep.candidates.inputs import file_keys
from presdep.config.records import Dataset, Protocol
from presdep.runtime.logs import log_to_file

p = snakemake.params  # noqa: F821 - injected by Snakemake
name = snakemake.wildcards.dataset  # noqa: F821
log_to_file(snakemake.log[0], input_keys=file_keys(name, p.dataset_config))  # noqa: F821
build_fixture(
    Dataset.from_spec(name, p.dataset_config, Protocol.from_dict(p.protocol)),
    snakemake.output.candidates,  # noqa: F821
    snakemake.output.qrels,  # noqa: F821
    params={"presdep_version": p.version, "dataset": p.dataset_config, "seed": p.protocol["seed"]},
    first_stage=snakemake.input.get("first_stage"),  # noqa: F821
    out_gold=snakemake.output.gold,  # noqa: F821
)
