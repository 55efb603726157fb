"""Snakemake adapter: fetch (or convert a local copy of) one catalogue entry."""
from pathlib import Path

from presdep.data.fetch.run import fetch
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])
job = snakemake.params.job
fetch(
    snakemake.wildcards.catalogue_id,
    job["entry"],
    Path(snakemake.output.manifest).parent,
    layout=job["layout"],
    local=job["local"],
)
