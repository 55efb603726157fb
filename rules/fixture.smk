# Fixture: the candidates and qrels contracts of one dataset.


rule build_fixture:
    input:
        unpack(fixture_inputs),
    output:
        candidates=f"{RESULTS}/{{dataset}}/candidates.parquet",
        qrels=f"{RESULTS}/{{dataset}}/qrels.parquet",
        gold=f"{RESULTS}/{{dataset}}/answers_gold.parquet",
    params:
        dataset_config=lambda wc: CFG.datasets[wc.dataset].as_dict(),
        protocol=lambda wc: CFG.datasets[wc.dataset].protocol.as_dict(),
        version=PRESDEP_VERSION,
    conda:
        "../envs/retrieval.yaml"
    log:
        f"{LOGS}/build_fixture/{{dataset}}.log",
    resources:
        mem_mb=2000,
        runtime=20,
    script:
        "../scripts/build_fixture.py"
