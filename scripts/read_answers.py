"""Snakemake adapter: the frozen reader answers one (variant, QA dataset)."""
from presdep.runtime.logs import log_to_file
from presdep.scoring.reader import read_answers_files

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
read_answers_files(
    scores_path=snakemake.input.scores,  # noqa: F821
    candidates_path=snakemake.input.candidates,  # noqa: F821
    out_path=snakemake.output.answers,  # noqa: F821
    reader_config=snakemake.params.reader,  # noqa: F821
    model_dir=snakemake.input.model_dir,  # noqa: F821
    max_doc_chars=snakemake.params.max_doc_chars,  # noqa: F821
    threads=snakemake.threads,  # noqa: F821
    answer_cache=snakemake.params.answer_cache or None,  # noqa: F821
    model_spec=snakemake.params.model,  # noqa: F821
)
