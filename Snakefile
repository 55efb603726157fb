# presdep: presentation dependence in batched LLM scoring, end to end.
#   snakemake --cores all results/table1.csv          (embedded default, CPU, offline)
#   snakemake results/table1.csv --cores 2 --configfile configs/examples/dl19-identity.yaml
#   snakemake -n results/table1.csv                     (inspect the DAG first)
#   a config with `name: NAME` writes results/NAME/ and logs/NAME/ instead (rules/common.smk, RESULTS)
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
include: "rules/figure1.smk"
include: "rules/position_profile.smk"
include: "rules/stability.smk"
include: "rules/decisions.smk"
include: "rules/verdicts.smk"
include: "rules/width.smk"
include: "rules/pool.smk"
include: "rules/context.smk"
include: "rules/render.smk"
include: "rules/named_run.smk"
include: "rules/preflight.smk"


# Before any job starts (the groups of --groups and the profiles are known only now, not while
# the rules are read): light_rules: local refuses a profile that still groups a light rule.
onstart:
    if CFG.light_rules == "local":
        check_light_rules_ungrouped(LIGHT_RULES, workflow.group_settings.overwrite_groups)


# Everything a run delivers (rules/common.smk, final_outputs): `make run` asks for exactly this.
rule all:
    input:
        final_outputs(),
    default_target: True
