# Models: fetch once into a plain safetensors directory; cache the CapCal prior per (model, B).

rule fetch_model:
    output:
        model_dir=directory("resources/models/{model}"),
    params:
        spec=_model_spec,
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/fetch_model/{model}.log",
    benchmark:
        "benchmarks/out/fetch_model/{model}.tsv"
    resources:
        mem_mb=lambda wc: int(_model_spec(wc).get("mem_mb", 4000)),
        runtime=60,
    script:
        "../scripts/fetch_model.py"


rule capcal_prior:
    input:
        model="resources/models/{model}",
        candidates=lambda wc: f"results/{_capcal_probe_dataset()}/candidates.parquet",
    output:
        prior="results/capcal/{model}/B{B}.parquet",
    wildcard_constraints:
        B=r"\d+",
    params:
        # The config spec + its name + the fetched directory: the same description the
        # score rule gives the scorer, so CapCal can check the prior belongs to the model.
        model=lambda wc, input: {**_model_spec(wc), "name": wc.model, "path": str(input.model)},
        n_probes=lambda wc: int((config.get("capcal") or {}).get("n_probes", 20)),
        probe_dataset=lambda wc: _capcal_probe_dataset(),
        max_doc_chars=lambda wc: int(config["protocol"]["max_doc_chars"]),
        device=lambda wc: _model_spec(wc).get("device", "auto"),
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/capcal_prior/{model}/B{B}.log",
    benchmark:
        "benchmarks/out/capcal_prior/{model}/B{B}.tsv"
    threads: MODEL_THREADS
    resources:
        mem_mb=lambda wc: int(_model_spec(wc).get("mem_mb", 4000)),
        runtime=30,
        gpu=lambda wc: int(_model_spec(wc).get("gpu", 0)),
    script:
        "../scripts/capcal_prior.py"
