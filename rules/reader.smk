# Reader: a frozen chat model answers each QA question from each presentation's
# retained paragraphs (score >= t*, t* frozen on the canonical presentation).
# Config: `reader: {model: <name in models>, max_new_tokens, batch_size, device, dtype}`.

QA_DATASETS = [name for name, spec in config["datasets"].items() if spec["task"] == "qa"]


def _reader_settings():
    reader = dict(config.get("reader") or {})
    model = reader.get("model")
    if QA_DATASETS and not model:
        raise ValueError("QA datasets need a reader: set `reader: {model: <name in models>}` in the config")
    if model and model not in config.get("models", {}):
        raise ValueError(f"reader.model {model!r} is not in config['models']")
    return reader


def reader_inputs(wildcards):
    return {
        "scores": f"results/scores/{wildcards.variant}/{wildcards.dataset}.parquet",
        "qrels": f"results/{wildcards.dataset}/qrels.parquet",
        "candidates": f"results/{wildcards.dataset}/candidates.parquet",
        "model_dir": f"resources/models/{_reader_settings()['model']}",
    }


rule read_answers:
    input:
        unpack(reader_inputs),
    output:
        answers="results/answers/{variant}/{dataset}.parquet",
    wildcard_constraints:
        dataset=_alternatives(QA_DATASETS),
    params:
        # The model entry's device (if any) is the reader's default device.
        reader=lambda wc: {
            "device": config["models"][_reader_settings()["model"]].get("device", "auto"),
            **_reader_settings(),
        },
        model=lambda wc: config["models"][_reader_settings()["model"]],
        max_doc_chars=lambda wc: int(protocol_for(config, wc.dataset)["max_doc_chars"]),
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/read_answers/{variant}/{dataset}.log",
    benchmark:
        "benchmarks/out/read_answers/{variant}/{dataset}.tsv"
    threads: workflow.cores
    resources:
        mem_mb=lambda wc: int(config["models"][_reader_settings()["model"]].get("mem_mb", 4000)),
        runtime=240,
        gpu=lambda wc: int(config["models"][_reader_settings()["model"]].get("gpu", 0)),
    script:
        "../scripts/read_answers.py"
