"""Snakemake adapter: generate one synthetic collection."""
from presdep.data.synthetic import SyntheticSpec, generate
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])
generate(SyntheticSpec(**snakemake.params.spec), snakemake.params.out_dir)
