"""Snakemake adapter: one run's render reads on one dataset -> its render metrics."""
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.metrics.render import render_metrics
from presdep.metrics.thresholds import read_thresholds
from presdep.runtime.logs import log_to_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
scores_path = snakemake.input.scores  # noqa: F821
metrics = render_metrics(read_table(scores_path, "scores"), read_table(snakemake.input.qrels, "qrels"),  # noqa: F821
                         dataset=snakemake.wildcards.dataset, variant=snakemake.params.variant,  # noqa: F821
                         thresholds=read_thresholds(snakemake.input.thresholds))  # noqa: F821
write_table(metrics, snakemake.output.metrics, "metrics",  # noqa: F821
            {"render_scores": str(scores_path), "thresholds": str(snakemake.input.thresholds)},  # noqa: F821
            queries=read_metadata(scores_path).get("queries"))
