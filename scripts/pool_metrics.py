"""Snakemake adapter: one run's pool reads on one dataset -> its pool metrics."""
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.metrics.pool import pool_metrics
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
scores_path = snakemake.input.scores  # noqa: F821
meta = read_metadata(scores_path)
metrics = pool_metrics(read_table(scores_path, "pool_scores"), read_table(snakemake.input.qrels, "qrels"),  # noqa: F821
                       dataset=snakemake.wildcards.dataset, variant=snakemake.params.variant)  # noqa: F821
write_table(metrics, snakemake.output.metrics, "metrics", {"pool_scores": str(scores_path)},  # noqa: F821
            queries=meta.get("queries"), skipped=meta.get("skipped"))
