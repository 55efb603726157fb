# Reader: a frozen chat model answers each QA question from each presentation's
# top-k paragraphs by score, in score order (no threshold).
# Config: `reader: {model: <name in models>, k, max_new_tokens, batch_size, device, dtype}`.

QA_DATASETS = [name for name, spec in config["datasets"].items() if spec["task"] == "qa"]
READER = dict(config["reader"])
READER_MODEL = READER.get("model")
if QA_DATASETS and not READER_MODEL:
    raise ValueError(f"QA datasets {QA_DATASETS} need a reader: set `reader: {{model: <name in models>}}`")
if READER_MODEL and READER_MODEL not in config["models"]:
    raise ValueError(f"reader.model {READER_MODEL!r} is not in config['models']")
READER_SPEC = config["models"][READER_MODEL] if READER_MODEL else {}
# The model entry's device and dtype are the reader's unless the reader section sets its own.
READER_SETTINGS = {**{k: READER_SPEC[k] for k in ("device", "dtype") if k in READER_SPEC}, **READER}


rule read_answers:
    input:
        scores="results/scores/{variant}/{dataset}.parquet",
        candidates="results/{dataset}/candidates.parquet",
        model_dir=f"resources/models/{READER_MODEL}",
    output:
        answers="results/answers/{variant}/{dataset}.parquet",
    wildcard_constraints:
        dataset=_alternatives(QA_DATASETS),
    params:
        reader=READER_SETTINGS,
        model=READER_SPEC,
        answer_cache=config["read_cache"]["answers_dir"] if config["read_cache"]["enabled"] else "",
        max_doc_chars=lambda wc: int(protocol_for(config, wc.dataset)["max_doc_chars"]),
        version=PRESDEP_VERSION,
    conda:
        "../envs/gpu.yaml"
    log:
        "logs/read_answers/{variant}/{dataset}.log",
    benchmark:
        "results/benchmarks/read_answers/{variant}/{dataset}.tsv"
    threads: MODEL_THREADS
    resources:
        mem_mb=lambda wc: int(READER_SPEC["mem_mb"]),
        runtime=240,
        gpu=lambda wc: int(READER_SPEC["gpu"]),
    script:
        "../scripts/read_answers.py"
