"""Snakemake adapter: silver labels of one training dataset from one teacher."""
from presdep.config.records import Protocol, Teacher
from presdep.runtime.logs import log_to_file
from presdep.training.silver import silver_labels_files

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
silver_labels_files(
    candidates_path=snakemake.input.candidates,  # noqa: F821
    out_path=snakemake.output.silver,  # noqa: F821
    teacher=Teacher.from_spec(snakemake.wildcards.teacher, p.teacher),  # noqa: F821
    dataset=snakemake.wildcards.dataset,  # noqa: F821
    protocol=Protocol.from_dict(p.protocol),
    model_dir=snakemake.input.get("model_dir"),  # noqa: F821
    cache_dir=p.cache_dir,
    threads=snakemake.threads,  # noqa: F821
)
