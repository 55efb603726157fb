"""Snakemake adapter: score every presentation of one (variant, dataset)."""
from presdep.logs import log_to_file
from presdep.scoring.job import score_dataset_files

log_to_file(snakemake.log[0])
score_dataset_files(
    candidates_path=snakemake.input.candidates,
    qrels_path=snakemake.input.qrels,
    out_path=snakemake.output.scores,
    dataset=snakemake.wildcards.dataset,
    variant=snakemake.params.variant,
    protocol=snakemake.params.protocol,
    model_dir=snakemake.input.get("model_dir"),
    reuse_scores_path=snakemake.input.get("reuse_scores"),
    selected_path=snakemake.input.get("selected"),
    seed=snakemake.params.seed,
    threads=snakemake.threads,
    read_cache=snakemake.params.read_cache or None,
)
