# Metrics: per-query values and aggregates of one (variant, dataset), in the metrics contract.


rule metrics:
    input:
        unpack(metrics_inputs),
        # reranking reads t* (and the test half) from the threshold artifact
        unpack(
            lambda wc: {"thresholds": f"{RESULTS}/thresholds/{wc.variant}/{wc.dataset}.json"}
            if CFG.datasets[wc.dataset].task == "rerank"
            else {}
        ),
    output:
        metrics=f"{RESULTS}/metrics/{{variant}}/{{dataset}}.parquet",
        # why each decision flipped (presdep.metrics.flip_ledger); its counts are among the metrics
        ledger=f"{RESULTS}/ledger/{{variant}}/{{dataset}}.parquet",
    params:
        task=lambda wc: CFG.datasets[wc.dataset].task,
        variant=lambda wc: run_variant(wc)[0],
        seed=lambda wc: run_variant(wc)[1],
        bsc_k=lambda wc: run_record(wc).bsc_k,
        bsc_ensembles=lambda wc: run_record(wc).bsc_ensembles,
        version=PRESDEP_VERSION,
    group:
        LIGHT_GROUP
    conda:
        "../envs/cpu.yaml"
    log:
        f"{LOGS}/metrics/{{variant}}/{{dataset}}.log",
    resources:
        mem_mb=2000,
        runtime=20,
    script:
        "../scripts/metrics.py"
