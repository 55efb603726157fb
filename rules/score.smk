# Scoring: ALL presentations of a (variant, dataset) in one job, one Parquet file.


def score_inputs(wildcards):
    inputs = {
        "candidates": f"results/{wildcards.dataset}/candidates.parquet",
        "qrels": f"results/{wildcards.dataset}/qrels.parquet",
    }
    v = config["variants"][wildcards.variant]
    model = v.get("model")
    if model and config["models"][model]["source"] == "gguf_package":
        inputs["model_dir"] = f"resources/models/{model}"
    if v.get("calibration") == "capcal":
        B = protocol_for(config, wildcards.dataset)["B"]
        inputs["capcal_prior"] = f"results/capcal/{model}/B{B}.parquet"
    return inputs


def _score_threads(wildcards):
    return 1 if config["variants"][wildcards.variant]["scorer"] == "identity" else workflow.cores


rule score:
    input:
        unpack(score_inputs),
    output:
        scores="results/scores/{variant}/{dataset}.parquet",
    params:
        variant=lambda wc: variant_config(config, wc.variant),
        protocol=lambda wc: protocol_for(config, wc.dataset),
        version=PRESDEP_VERSION,
    log:
        "logs/score/{variant}/{dataset}.log",
    benchmark:
        "benchmarks/out/score/{variant}/{dataset}.tsv"
    threads: _score_threads
    resources:
        mem_mb=lambda wc: 1000 if config["variants"][wc.variant]["scorer"] == "identity" else 8000,
        runtime=lambda wc: 10 if config["variants"][wc.variant]["scorer"] == "identity" else 240,
    script:
        "../scripts/score.py"
