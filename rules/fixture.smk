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
        dataset_config=lambda wc: CFG.datasets[wc.dataset].as_dict(),
        protocol=lambda wc: CFG.datasets[wc.dataset].protocol.as_dict(),
        version=PRESDEP_VERSION,
    conda:
        "../envs/retrieval.yaml"
    log:
        "logs/build_fixture/{dataset}.log",
    resources:
        mem_mb=2000,
        runtime=20,
    script:
        "../scripts/build_fixture.py"
