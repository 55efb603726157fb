"""Snakemake adapter: LoRA-train one student (objective, lambda) under one seed; resumes after a kill."""
import os
from pathlib import Path

# Before torch loads (it reads the allocator settings then): expandable segments, so micro-batches of
# varying shapes do not fragment the GPU's memory; a user's own allocator settings are kept. The
# same as presdep.training.oom.prefer_expandable_segments, which train_student_files calls again for
# a process that loaded torch before this script ran.
if "PYTORCH_ALLOC_CONF" not in os.environ:
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

from presdep.config.records import Protocol, TrainingSettings  # noqa: E402
from presdep.runtime.logs import log_to_file  # noqa: E402
from presdep.training.loop import train_student_files  # noqa: E402

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
