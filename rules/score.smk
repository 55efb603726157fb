# Scoring: ALL presentations of a (variant, dataset) in one job, one Parquet file.


rule score:
    input:
        unpack(score_inputs),
    output:
        scores="results/scores/{variant}/{dataset}.parquet",
    params:
        variant=lambda wc: variant_config(config, run_variant(wc)[0]),
        seed=lambda wc: run_variant(wc)[1],
        protocol=lambda wc: protocol_for(config, wc.dataset),
        version=PRESDEP_VERSION,
        # Where model reads are cached ("": off); a cache hit equals a fresh read bit for bit.
        read_cache=lambda wc: config["read_cache"]["dir"] if config["read_cache"]["enabled"] else "",
    conda:
        lambda wc: {"hosted": "../envs/hosted.yaml", "identity": "../envs/cpu.yaml"}.get(_scorer_of(wc), "../envs/gpu.yaml")
    log:
        "logs/score/{variant}/{dataset}.log",
    benchmark:
        "results/benchmarks/score/{variant}/{dataset}.tsv"
    threads: _score_threads
    resources:
        mem_mb=lambda wc: 1000 if _scorer_of(wc) == "identity" else 8000,
        runtime=lambda wc: 10 if _scorer_of(wc) == "identity" else 240,
        teacher_api=lambda wc: 1 if _scorer_of(wc) == "hosted" else 0,
    script:
        "../scripts/score.py"
