"""Snakemake adapter: rule capcal_prior -> presdep.scoring.capcal.compute_capcal_prior."""
from presdep.logs import log_to_file
from presdep.scoring.capcal import compute_capcal_prior

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
compute_capcal_prior(
    snakemake.params.model,  # noqa: F821 - the config spec + name + fetched path
    snakemake.input.candidates,  # noqa: F821
    snakemake.output.prior,  # noqa: F821
    B=int(snakemake.wildcards.B),  # noqa: F821
    n_probes=snakemake.params.n_probes,  # noqa: F821
    max_doc_chars=snakemake.params.max_doc_chars,  # noqa: F821
    device=snakemake.params.device,  # noqa: F821
    probe_dataset=snakemake.params.probe_dataset,  # noqa: F821
    threads=snakemake.threads,  # noqa: F821
)
