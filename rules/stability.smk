# Stability: does the leaderboard survive resampling of queries and training seeds?


rule stability:
    input:
        metrics=metrics_files(),
    output:
        json="results/stability/table1.json",
        svg_dir=directory("results/stability/svg"),
    params:
        resamples=CFG.stability["resamples"],
        seed=CFG.stability["seed"],
        version=PRESDEP_VERSION,
    log:
        "logs/stability.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../scripts/stability.py"
