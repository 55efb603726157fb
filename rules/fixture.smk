# Fixture: the candidates and qrels contracts of one dataset.


rule build_fixture:
    input:
        unpack(candidate_source_files),
        unpack(qrels_input),
    output:
        candidates="results/{dataset}/candidates.parquet",
        qrels="results/{dataset}/qrels.parquet",
        gold="results/{dataset}/answers_gold.parquet",
    params:
        dataset_config=lambda wc: config["datasets"][wc.dataset],
        seed=config["protocol"]["seed"],
        meta=lambda wc: rule_params(config["datasets"][wc.dataset], {"seed": config["protocol"]["seed"]}),
    conda:
        "../envs/retrieval.yaml"
    log:
        "logs/build_fixture/{dataset}.log",
    resources:
        mem_mb=2000,
        runtime=20,
    script:
        "../scripts/build_fixture.py"
