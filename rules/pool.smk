# The pool perturbation (docs/methods/pool-perturbation.md): on each dataset of
# `pool_perturbation: {datasets: [...]}`, every untrained single-pass reranking row reads the
# canonical pool, the pool with one member replaced by the next candidate and the pool without it,
# in first-stage order; metrics on the shared documents, then the table and the contrasts.

localrules:
    pool_metrics,
    pool_table,


rule score_pool:
    input:
        unpack(score_inputs),
    output:
        scores=f"{RESULTS}/pool/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(POOL_DATASETS),
        variant=alternatives(POOL_RUNS),
    params:
        variant_name=lambda wc: run_variant(wc)[0],
        variant=lambda wc: run_record(wc).as_dict(),
        model=lambda wc: thaw(CFG.model(run_record(wc).model)) if run_record(wc).model else None,
        protocol=lambda wc: CFG.datasets[wc.dataset].protocol.as_dict(),
        settings={k: POOL[k] for k in ("pool", "seed", "query_sample_seed", "queries")},
        read_cache=CFG.read_cache.scores_path,
        version=PRESDEP_VERSION,
    conda:
        lambda wc: f"../envs/{scorer_caps(wc).env}.yaml"
    log:
        f"{LOGS}/score_pool/{{variant}}/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score_pool/{{variant}}/{{dataset}}.tsv"
    threads: _score_threads
    resources:
        mem_mb=lambda wc: scorer_caps(wc).mem_mb,
        runtime=lambda wc: scorer_caps(wc).runtime,
        teacher_api=lambda wc: scorer_caps(wc).api_slots,
    script:
        "../scripts/score_pool.py"


rule pool_metrics:
    input:
        scores=f"{RESULTS}/pool/{{variant}}/{{dataset}}.parquet",
        qrels=f"{RESULTS}/{{dataset}}/qrels.parquet",
    output:
        metrics=f"{RESULTS}/pool_metrics/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(POOL_DATASETS),
        variant=alternatives(POOL_RUNS),
    params:
        variant=lambda wc: run_variant(wc)[0],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/pool_metrics/{{variant}}/{{dataset}}.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/pool_metrics.py"


rule pool_table:
    input:
        metrics=pool_metrics_files(),
    output:
        csv=f"{RESULTS}/pool_perturbation.csv",
        contrasts=f"{RESULTS}/pool_contrasts.csv",
        md=report(f"{RESULTS}/pool_perturbation.md", caption="report/pool_perturbation.rst", category="Decisions"),
    params:
        variants=CFG.variants_table(),
        pairs=POOL["contrasts"],
        resamples=POOL["resamples"],
        seed=POOL["bootstrap_seed"],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/pool_table.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/pool_table.py"
