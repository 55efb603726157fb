"""Snakemake adapter: one run's context reads on one dataset -> its context metrics."""
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.metrics.context import context_metrics
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
scores_path = snakemake.input.scores  # noqa: F821
meta = read_metadata(scores_path)
metrics = context_metrics(read_table(scores_path, "context_scores"), read_table(snakemake.input.qrels, "qrels"),  # noqa: F821
                          dataset=snakemake.wildcards.dataset, variant=snakemake.params.variant,  # noqa: F821
                          donors=meta.get("donor_length_error"))
write_table(metrics, snakemake.output.metrics, "metrics", {"context_scores": str(scores_path)},  # noqa: F821
            queries=meta.get("queries"), donor_length_error=meta.get("donor_length_error"))
