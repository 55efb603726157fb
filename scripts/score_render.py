"""Snakemake adapter: the render perturbations' reads of one (run, dataset)."""
from presdep.config.records import Protocol
from presdep.runtime.logs import log_to_file
from presdep.scoring.job import scoring_run
from presdep.scoring.render_job import score_renders_file

log_to_file(snakemake.log[0])  # noqa: F821 - injected by Snakemake
p = snakemake.params  # noqa: F821
score_renders_file(
    candidates_path=snakemake.input.candidates,  # noqa: F821
    out_path=snakemake.output.scores,  # noqa: F821
    dataset=snakemake.wildcards.dataset,  # noqa: F821
    run=scoring_run(p.variant_name, p.variant, model=p.model, model_dir=snakemake.input.get("model_dir"),  # noqa: F821
                    selected_path=None, seed=None),
    protocol=Protocol.from_dict(p.protocol),
    settings=p.settings,
    threads=snakemake.threads,  # noqa: F821
    read_cache=p.read_cache or None,
)
