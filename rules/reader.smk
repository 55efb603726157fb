# Reader: a frozen chat model answers each QA question from each presentation's
# top-k paragraphs by score, in score order (no threshold).
# Config: `reader: {model: <name in models>, k, max_new_tokens, batch_size, device, dtype, answer_extraction}`.

QA_DATASETS = CFG.datasets_of_task("qa")
READER = thaw(CFG.reader)
READER_MODEL = READER.get("model")
if QA_DATASETS and not READER_MODEL:
    raise ValueError(f"QA datasets {QA_DATASETS} need a reader: set `reader: {{model: <name in models>}}`")
READER_SPEC = thaw(CFG.model(READER_MODEL)) if READER_MODEL else {}
# The model entry's device and dtype are the reader's unless the reader section sets its own.
READER_SETTINGS = {**{k: READER_SPEC[k] for k in ("device", "dtype") if k in READER_SPEC}, **READER}


rule read_answers:
    input:
        scores=f"{RESULTS}/scores/{{variant}}/{{dataset}}.parquet",
        candidates=f"{RESULTS}/{{dataset}}/candidates.parquet",
        model_dir=f"resources/models/{READER_MODEL}",
    output:
        answers=f"{RESULTS}/answers/{{variant}}/{{dataset}}.parquet",
    wildcard_constraints:
        dataset=alternatives(QA_DATASETS),
    params:
        reader=READER_SETTINGS,
        model=READER_SPEC,
        answer_cache=CFG.read_cache.answers_path,
        max_doc_chars=lambda wc: CFG.datasets[wc.dataset].protocol.max_doc_chars,
        version=PRESDEP_VERSION,
    conda:
        "../envs/gpu.yaml"
    log:
        f"{LOGS}/read_answers/{{variant}}/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/read_answers/{{variant}}/{{dataset}}.tsv"
    threads: MODEL_THREADS
    resources:
        mem_mb=lambda wc: READER_SPEC["mem_mb"],
        runtime=240,
        gpu=lambda wc: READER_SPEC["gpu"],
    script:
        "../scripts/read_answers.py"
