"""Snakemake adapter: score every presentation of one (variant, dataset)."""
from presdep.config.records import Protocol
from presdep.runtime.logs import log_to_file
from presdep.scoring.job import score_dataset_files, scoring_run

log_to_file(snakemake.log[0])
p = snakemake.params  # noqa: F821
score_dataset_files(
    candidates_path=snakemake.input.candidates,
    qrels_path=snakemake.input.qrels,
    out_path=snakemake.output.scores,
    dataset=snakemake.wildcards.dataset,
    run=scoring_run(p.variant_name, p.variant, model=p.model, model_dir=snakemake.input.get("model_dir"),
                    selected_path=snakemake.input.get("selected"), seed=p.seed),
    protocol=Protocol.from_dict(p.protocol),
    reuse_scores_path=snakemake.input.get("reuse_scores"),
    threads=snakemake.threads,
    read_cache=p.read_cache or None,
)
