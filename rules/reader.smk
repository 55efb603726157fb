# Reader: a frozen chat model answers each QA question from each presentation's
# retained paragraphs (score >= t*, t* frozen on the canonical presentation).
# Config: `reader: {model: <name in models>, max_new_tokens, batch_size, device, dtype}`.

QA_DATASETS = [name for name, spec in config["datasets"].items() if spec["task"] == "qa"]
READER = dict(config.get("reader") or {})
READER_MODEL = READER.get("model")
if QA_DATASETS and not READER_MODEL:
    raise ValueError(f"QA datasets {QA_DATASETS} need a reader: set `reader: {{model: <name in models>}}`")
if READER_MODEL and READER_MODEL not in config.get("models", {}):
    raise ValueError(f"reader.model {READER_MODEL!r} is not in config['models']")
READER_SPEC = config.get("models", {}).get(READER_MODEL) or {}
# The model entry's device (if any) is the reader's default device.
READER_SETTINGS = {"device": READER_SPEC.get("device", "auto"), **READER}


rule read_answers:
    input:
        scores="results/scores/{variant}/{dataset}.parquet",
        qrels="results/{dataset}/qrels.parquet",
        candidates="results/{dataset}/candidates.parquet",
        model_dir=f"resources/models/{READER_MODEL}",
    output:
        answers="results/answers/{variant}/{dataset}.parquet",
    wildcard_constraints:
        dataset=_alternatives(QA_DATASETS),
    params:
        reader=READER_SETTINGS,
        model=READER_SPEC,
        max_doc_chars=lambda wc: int(protocol_for(config, wc.dataset)["max_doc_chars"]),
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/read_answers/{variant}/{dataset}.log",
    benchmark:
        "benchmarks/out/read_answers/{variant}/{dataset}.tsv"
    threads: MODEL_THREADS
    resources:
        mem_mb=int(READER_SPEC.get("mem_mb", 4000)),
        runtime=240,
        gpu=int(READER_SPEC.get("gpu", 0)),
    script:
        "../scripts/read_answers.py"
