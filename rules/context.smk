# The context decomposition A1-A4 (docs/methods/context-decomposition.md): on each dataset of
# `context_decomposition: {datasets: [...]}`, every untrained single-pass reranking row whose scorer
# reads selected slots reads each pool document alone (A1), in its chunk (A2), among length-matched
# donors (A3) and alone under the full skeleton (A4), on the canonical order and the shuffles;
# per-query nDCG@10 per arm and the terms, then the table.

localrules:
    context_metrics,
    context_table,


rule score_context:
    input:
        unpack(score_inputs),
        qrels=f"{RESULTS}/{{dataset}}/qrels.parquet",
    output:
        scores=f"{RESULTS}/context/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(CONTEXT_DATASETS),
        variant=alternatives(CONTEXT_RUNS),
    params:
        variant_name=lambda wc: run_variant(wc)[0],
        variant=lambda wc: run_record(wc).as_dict(),
        model=lambda wc: thaw(CFG.model(run_record(wc).model)) if run_record(wc).model else None,
        protocol=lambda wc: CFG.datasets[wc.dataset].protocol.as_dict(),
        settings={k: CONTEXT[k] for k in ("mode", "pool", "shuffles", "queries", "query_sample_seed")},
        read_cache=CFG.read_cache.scores_path,
        version=PRESDEP_VERSION,
    conda:
        lambda wc: f"../envs/{scorer_caps(wc).env}.yaml"
    log:
        f"{LOGS}/score_context/{{variant}}/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score_context/{{variant}}/{{dataset}}.tsv"
    threads: _score_threads
    resources:
        mem_mb=lambda wc: scorer_caps(wc).mem_mb,
        runtime=lambda wc: scorer_caps(wc).runtime,
        teacher_api=lambda wc: scorer_caps(wc).api_slots,
    script:
        "../scripts/score_context.py"


rule context_metrics:
    input:
        scores=f"{RESULTS}/context/{{variant}}/{{dataset}}.parquet",
        qrels=f"{RESULTS}/{{dataset}}/qrels.parquet",
    output:
        metrics=f"{RESULTS}/context_metrics/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(CONTEXT_DATASETS),
        variant=alternatives(CONTEXT_RUNS),
    params:
        variant=lambda wc: run_variant(wc)[0],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/context_metrics/{{variant}}/{{dataset}}.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/context_metrics.py"


rule context_table:
    input:
        metrics=context_metrics_files(),
    output:
        csv=f"{RESULTS}/context_decomposition.csv",
        md=report(f"{RESULTS}/context_decomposition.md", caption="report/context_decomposition.rst",
                  category="Decisions"),
    params:
        variants=CFG.variants_table(),
        resamples=CONTEXT["resamples"],
        seed=CONTEXT["bootstrap_seed"],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/context_table.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/context_table.py"
