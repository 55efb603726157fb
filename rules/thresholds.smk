# The reranking threshold t* of one (run, dataset): development/test split and t* tuned on
# the development half. The one source of t* for the metrics and Figure 1.


rule thresholds:
    input:
        scores=f"{RESULTS}/scores/{{variant}}/{{dataset}}.parquet",
        qrels=f"{RESULTS}/{{dataset}}/qrels.parquet",
    output:
        json=f"{RESULTS}/thresholds/{{variant}}/{{dataset}}.json",
    params:
        split_seed=CFG.split_seed,
        bsc_k=lambda wc: run_record(wc).bsc_k,
        bsc_ensembles=lambda wc: run_record(wc).bsc_ensembles,
        version=PRESDEP_VERSION,
    group:
        LIGHT_GROUP
    conda:
        "../envs/cpu.yaml"
    log:
        f"{LOGS}/thresholds/{{variant}}/{{dataset}}.log",
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/thresholds.py"
