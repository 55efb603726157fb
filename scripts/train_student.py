"""Snakemake adapter: LoRA-train one student (objective, lambda) under one seed; resumes after a kill."""
from pathlib import Path

from presdep.config.records import Protocol, TrainingSettings
from presdep.runtime.logs import log_to_file
from presdep.training.loop import train_student_files

log_to_file(snakemake.log[0])
train_student_files(
    model_dir=snakemake.input.model_dir,
    silver_path=snakemake.input.silver,
    train_candidates_path=snakemake.input.train_candidates,
    train_qrels_path=snakemake.input.train_qrels,
    heldout_candidates_path=snakemake.input.heldout_candidates,
    heldout_qrels_path=snakemake.input.heldout_qrels,
    out_dir=Path(snakemake.output.done).parent,
    student=TrainingSettings.from_dict(snakemake.params.student),
    protocol=Protocol.from_dict(snakemake.params.protocol),
    seed=int(snakemake.wildcards.seed),
    threads=snakemake.threads,
    provenance={"student": snakemake.wildcards.student, "variant": snakemake.params.variant},
)
