# The paper's decision programs over every metrics file: metric discordance and the contrasts
# between rows (docs/methods/discordance.md, docs/methods/contrasts.md).


localrules:
    discordance,
    contrasts,


rule discordance:
    input:
        metrics=metrics_files(),
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
        metrics=metrics_files(),
    output:
        csv=f"{RESULTS}/contrasts.csv",
        md=report(f"{RESULTS}/contrasts.md", caption="report/contrasts.rst", category="Decisions"),
    params:
        variants=CFG.variants_table(),
        settings=thaw(CFG.raw["contrasts"]),
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/contrasts.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=4000,
    script:
        "../scripts/contrasts.py"
