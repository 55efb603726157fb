# The paper's decision programs over every metrics file: metric discordance, the contrasts between
# rows, and matched retention in the paper's form (docs/methods/discordance.md, contrasts.md,
# jaccard.md#matched-retention-the-papers-form).


localrules:
    discordance,
    contrasts,
    matched_retention,


rule discordance:
    input:
        metrics=metrics_files("table1"),
    output:
        csv=f"{RESULTS}/discordance.csv",
        md=report(f"{RESULTS}/discordance.md", caption="report/discordance.rst", category="Decisions"),
    params:
        variants=CFG.variants_table(),
        settings=thaw(CFG.raw["discordance"]),
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/discordance.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/discordance.py"


rule contrasts:
    input:
        metrics=metrics_files("table1"),
    output:
        csv=f"{RESULTS}/contrasts.csv",
        md=report(f"{RESULTS}/contrasts.md", caption="report/contrasts.rst", category="Decisions"),
    params:
        variants=CFG.variants_table(),
        settings=thaw(CFG.raw["contrasts"]),
        shared_permutations=shared_permutation_datasets(CFG),
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/contrasts.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=4000,
    script:
        "../scripts/contrasts.py"


rule matched_reference:
    input:
        unpack(matched_reference_of),
        scores=f"{RESULTS}/scores/{{variant}}/{{dataset}}.parquet",
        thresholds=f"{RESULTS}/thresholds/{{variant}}/{{dataset}}.json",
    output:
        matched=f"{RESULTS}/matched/{{variant}}/{{dataset}}.parquet",
    params:
        seed=lambda wc: run_variant(wc)[1],
        bsc_k=lambda wc: run_record(wc).bsc_k,
        bsc_ensembles=lambda wc: run_record(wc).bsc_ensembles,
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/matched/{{variant}}/{{dataset}}.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/matched_reference.py"


rule matched_retention:
    input:
        matched=matched_reference_files(),
        metrics=metrics_files("table1"),
    output:
        csv=f"{RESULTS}/matched_retention.csv",
        md=report(f"{RESULTS}/matched_retention.md", caption="report/matched_retention.rst", category="Decisions"),
    params:
        variants=CFG.variants_table(),
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/matched_retention.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/matched_retention.py"
