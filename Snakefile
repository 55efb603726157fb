# presdep: presentation dependence in batched LLM scoring, end to end.
#   snakemake --cores all results/table1.csv          (embedded default, CPU, offline)
#   snakemake results/table1.csv --cores 2 --configfile configs/examples/dl19-identity.yaml
#   snakemake -n results/table1.csv                     (inspect the DAG first)
from snakemake.utils import min_version

min_version("8.20")


configfile: "workflow_config.yaml"


include: "rules/common.smk"
include: "rules/model_inputs.smk"
include: "rules/training_inputs.smk"
include: "rules/data.smk"
include: "rules/fetch.smk"
include: "rules/retrieval.smk"
include: "rules/fixture.smk"
include: "rules/model.smk"
include: "rules/training.smk"
include: "rules/score.smk"
include: "rules/reader.smk"
include: "rules/thresholds.smk"
include: "rules/metrics.smk"
include: "rules/tables.smk"
include: "rules/stability.smk"


rule all:
    input:
        "results/table1.csv",
        "results/table1.md",
        "results/table1_counts.csv",
        "results/stability/table1.json",
        metrics_files(),
        # Figure 1 only where the config names its example run and dataset.
        ["results/figure1.svg"] if FIGURE1 else [],
    default_target: True
