# The render perturbations (docs/methods/render-perturbations.md): on each dataset of
# `render_perturbations: {datasets: [...]}`, every untrained single-pass reranking row whose scorer
# reads a prompt's render reads the first-stage order under five surfaces per kind (labels,
# separators, rubric paraphrases, grade scales); the metrics of a score file per kind at the run's
# frozen t*, then the table.

localrules:
    render_metrics,
    render_table,


rule score_render:
    input:
        unpack(score_inputs),
    output:
        scores=f"{RESULTS}/render/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(RENDER_DATASETS),
        variant=alternatives(RENDER_RUNS),
    params:
        variant_name=lambda wc: run_variant(wc)[0],
        variant=lambda wc: run_record(wc).as_dict(),
        model=lambda wc: thaw(CFG.model(run_record(wc).model)) if run_record(wc).model else None,
        protocol=lambda wc: CFG.datasets[wc.dataset].protocol.as_dict(),
        settings={k: RENDER[k] for k in ("kinds", "seed", "queries", "query_sample_seed")},
        read_cache=CFG.read_cache.scores_path,
        version=PRESDEP_VERSION,
    conda:
        lambda wc: f"../envs/{scorer_caps(wc).env}.yaml"
    log:
        f"{LOGS}/score_render/{{variant}}/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score_render/{{variant}}/{{dataset}}.tsv"
    threads: _score_threads
    resources:
        mem_mb=lambda wc: scorer_caps(wc).mem_mb,
        runtime=lambda wc: scorer_caps(wc).runtime,
        teacher_api=lambda wc: scorer_caps(wc).api_slots,
    script:
        "../scripts/score_render.py"


rule render_metrics:
    input:
        scores=f"{RESULTS}/render/{{variant}}/{{dataset}}.parquet",
        qrels=f"{RESULTS}/{{dataset}}/qrels.parquet",
        thresholds=f"{RESULTS}/thresholds/{{variant}}/{{dataset}}.json",
    output:
        metrics=f"{RESULTS}/render_metrics/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(RENDER_DATASETS),
        variant=alternatives(RENDER_RUNS),
    params:
        variant=lambda wc: run_variant(wc)[0],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/render_metrics/{{variant}}/{{dataset}}.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/render_metrics.py"


rule render_table:
    input:
        metrics=render_metrics_files(),
    output:
        csv=f"{RESULTS}/render_perturbations.csv",
        md=report(f"{RESULTS}/render_perturbations.md", caption="report/render_perturbations.rst",
                  category="Decisions"),
    params:
        variants=CFG.variants_table(),
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/render_table.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/render_table.py"
