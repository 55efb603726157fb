# Stability: does the leaderboard survive resampling of queries and training seeds?


rule stability:
    input:
        metrics=metrics_files("table1"),
    output:
        json=f"{RESULTS}/stability/table1.json",
        # one <column>.svg per analysed Table 1 column, each a report entry with its column as label
        svg_dir=report(
            directory(f"{RESULTS}/stability/svg"),
            patterns=["{column}.svg"],
            caption="report/stability.rst",
            category="Stability",
            labels={"Table 1 column": "{column}"},
        ),
    params:
        resamples=CFG.stability["resamples"],
        seed=CFG.stability["seed"],
        labels={name: v.label for name, v in CFG.variants.items()},
        shared_permutations=shared_permutation_datasets(CFG),
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/stability.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../scripts/stability.py"
