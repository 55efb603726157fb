"""Snakemake adapter: the frozen verdict reader judges one (run, claims dataset)."""
from presdep.runtime.logs import log_to_file
from presdep.scoring.verdict_reader import read_verdicts_files

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
read_verdicts_files(
    scores_path=snakemake.input.scores,  # noqa: F821
    candidates_path=snakemake.input.candidates,  # noqa: F821
    qrels_path=snakemake.input.qrels,  # noqa: F821
    labels_path=snakemake.input.labels,  # noqa: F821
    labels_format=snakemake.params.labels_format,  # noqa: F821
    out_path=snakemake.output.verdicts,  # noqa: F821
    reader_config=snakemake.params.reader,  # noqa: F821
    model_dir=snakemake.input.model_dir,  # noqa: F821
    max_doc_chars=snakemake.params.max_doc_chars,  # noqa: F821
    threads=snakemake.threads,  # noqa: F821
    answer_cache=snakemake.params.answer_cache or None,  # noqa: F821
    model_spec=snakemake.params.model,  # noqa: F821
)
