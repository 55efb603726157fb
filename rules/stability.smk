# Stability: does the leaderboard survive resampling of queries and training seeds?


rule stability:
    input:
        metrics=metrics_files(),
    output:
        json=f"{RESULTS}/stability/table1.json",
        svg_dir=directory(f"{RESULTS}/stability/svg"),
    params:
        resamples=CFG.stability["resamples"],
        seed=CFG.stability["seed"],
        labels={name: v.label for name, v in CFG.variants.items()},
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
