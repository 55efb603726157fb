"""Snakemake adapter: silver labels of one training dataset from one teacher."""
from presdep.logs import log_to_file
from presdep.training.silver import silver_labels_files

log_to_file(snakemake.log[0])
silver_labels_files(
    candidates_path=snakemake.input.candidates,
    out_path=snakemake.output.silver,
    teacher=snakemake.wildcards.teacher,
    teacher_spec=snakemake.params.teacher,
    dataset=snakemake.wildcards.dataset,
    B=snakemake.params.protocol["B"],
    seed=snakemake.params.protocol["seed"],
    max_doc_chars=snakemake.params.protocol["max_doc_chars"],
    rubric=snakemake.params.protocol["rubric"],
    instruction=snakemake.params.protocol["instruction"],
    model_dir=snakemake.input.get("model_dir"),
    cache_dir=snakemake.params.cache_dir,
    threads=snakemake.threads,
)
