# The position profile: every run's slot profile side by side (docs/methods/position.md).


localrules:
    position_profile,


rule position_profile:
    input:
        metrics=metrics_files(),
    output:
        svg=report(f"{RESULTS}/position_profile.svg", caption="report/position_profile.rst", category="Position profile"),
        png=f"{RESULTS}/position_profile.png",
    params:
        labels={name: v.label for name, v in CFG.variants.items()},
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/position_profile.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/position_profile.py"
