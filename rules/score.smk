# Scoring: ALL presentations of a (variant, dataset) in one job, one Parquet file.


rule score:
    input:
        unpack(score_inputs),
    output:
        scores=f"{RESULTS}/scores/{{variant}}/{{dataset}}.parquet",
    params:
        variant_name=lambda wc: run_variant(wc)[0],
        variant=lambda wc: run_record(wc).as_dict(),
        # The models entry the variant names (its folder comes as the model_dir input).
        model=lambda wc: thaw(CFG.model(run_record(wc).model)) if run_record(wc).model else None,
        seed=lambda wc: run_variant(wc)[1],
        protocol=lambda wc: CFG.datasets[wc.dataset].protocol.as_dict(),
        version=PRESDEP_VERSION,
        # Where model reads are cached ("": off); a cache hit equals a fresh read bit for bit.
        read_cache=CFG.read_cache.scores_path,
    conda:
        # The scorer's capability record names its environment, threads and resources.
        lambda wc: f"../envs/{scorer_caps(wc).env}.yaml"
    log:
        f"{LOGS}/score/{{variant}}/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score/{{variant}}/{{dataset}}.tsv"
    threads: _score_threads
    resources:
        mem_mb=lambda wc: scorer_caps(wc).mem_mb,
        runtime=lambda wc: scorer_caps(wc).runtime,
        teacher_api=lambda wc: scorer_caps(wc).api_slots,
    script:
        "../scripts/score.py"
