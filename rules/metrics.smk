# Metrics: per-query values and aggregates of one (variant, dataset), in the metrics contract.


rule metrics:
    input:
        unpack(metrics_inputs),
    output:
        metrics="results/metrics/{variant}/{dataset}.parquet",
    params:
        task=lambda wc: config["datasets"][wc.dataset]["task"],
        variant=lambda wc: run_variant(wc)[0],
        seed=lambda wc: run_variant(wc)[1],
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/metrics/{variant}/{dataset}.log",
    resources:
        mem_mb=2000,
        runtime=20,
    script:
        "../scripts/metrics.py"
