# The verdict reader (docs/methods/verdict-flip.md): on each claims dataset of
# `verdict_reader: {datasets: [...]}`, a frozen chat model judges every presentation's top-k
# passages of every reranking run; the verdict flip and its companions per claim, then the table.
from presdep.config.catalogue import verdict_label_jobs, verdict_labels_outputs

VERDICT = thaw(CFG.verdict_reader)
VERDICT_MODEL = VERDICT.get("model") or thaw(CFG.reader).get("model")
VERDICT_SPEC = thaw(CFG.model(VERDICT_MODEL)) if VERDICT_DATASETS else {}
# The model entry's device and dtype are the verdict reader's unless its section sets its own.
VERDICT_SETTINGS = {**{k: VERDICT_SPEC[k] for k in ("device", "dtype") if k in VERDICT_SPEC},
                    **{k: v for k, v in VERDICT.items() if k not in ("datasets", "model")}}
VERDICT_LABEL_JOBS = verdict_label_jobs(CFG.datasets, VERDICT_DATASETS, overrides=CFG.catalogue_overrides)


localrules:
    verdict_metrics,
    verdict_table,


rule fetch_verdict_labels:
    output:
        labels=verdict_labels_outputs("{catalogue_id}")["labels"],
        manifest=verdict_labels_outputs("{catalogue_id}")["manifest"],
    wildcard_constraints:
        catalogue_id=alternatives(VERDICT_LABEL_JOBS),
    params:
        source=lambda w: VERDICT_LABEL_JOBS[w.catalogue_id],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/fetch_verdict_labels/{{catalogue_id}}.log",
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/fetch_verdict_labels.py"


rule read_verdicts:
    input:
        scores=f"{RESULTS}/scores/{{variant}}/{{dataset}}.parquet",
        candidates=f"{RESULTS}/{{dataset}}/candidates.parquet",
        qrels=f"{RESULTS}/{{dataset}}/qrels.parquet",
        labels=lambda wc: CFG.datasets[wc.dataset].spec["verdict_labels"]["path"],
        model_dir=f"resources/models/{VERDICT_MODEL}",
    output:
        verdicts=f"{RESULTS}/verdicts/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(VERDICT_DATASETS),
    params:
        reader=VERDICT_SETTINGS,
        model=VERDICT_SPEC,
        labels_format=lambda wc: CFG.datasets[wc.dataset].spec["verdict_labels"]["format"],
        answer_cache=CFG.read_cache.answers_path,
        max_doc_chars=lambda wc: CFG.datasets[wc.dataset].protocol.max_doc_chars,
        version=PRESDEP_VERSION,
    conda:
        "../envs/gpu.yaml"
    log:
        f"{LOGS}/read_verdicts/{{variant}}/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/read_verdicts/{{variant}}/{{dataset}}.tsv"
    threads: MODEL_THREADS
    resources:
        mem_mb=lambda wc: VERDICT_SPEC["mem_mb"],
        runtime=240,
        gpu=lambda wc: VERDICT_SPEC["gpu"],
    script:
        "../scripts/read_verdicts.py"


rule verdict_metrics:
    input:
        verdicts=f"{RESULTS}/verdicts/{{variant}}/{{dataset}}.parquet",
    output:
        metrics=f"{RESULTS}/verdict_metrics/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(VERDICT_DATASETS),
    params:
        variant=lambda wc: run_variant(wc)[0],
        seed=lambda wc: run_variant(wc)[1],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/verdict_metrics/{{variant}}/{{dataset}}.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/verdict_metrics.py"


rule verdict_table:
    input:
        metrics=verdict_metrics_files(),
    output:
        csv=f"{RESULTS}/verdict_flip.csv",
        md=report(f"{RESULTS}/verdict_flip.md", caption="report/verdict_flip.rst", category="Decisions"),
    params:
        variants=CFG.variants_table(),
        k=VERDICT.get("k"),
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/verdict_table.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/verdict_table.py"
