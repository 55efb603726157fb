# A config with `name: NAME` writes under results/NAME/. Asking it for an unnamed run's path
# (results/table1.csv) would end in "No rule to produce results/table1.csv"; this rule matches
# exactly those paths and its input function says where the file is, at DAG time (dry runs too).

if CFG.name:

    rule results_of_a_named_config:
        input:
            lambda wc: named_config_refusal(wc.target),
        output:
            "results/{target}",
        wildcard_constraints:
            target=unnamed_run_paths(),
        run:
            raise ValueError(named_config_refusal(wildcards.target))
