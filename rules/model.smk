# Models: fetch once into a plain safetensors directory.

rule fetch_model:
    output:
        model_dir=directory("resources/models/{model}"),
    params:
        spec=_model_spec,
        version=PRESDEP_VERSION,
    conda:
        "../envs/gpu.yaml"
    log:
        f"{LOGS}/fetch_model/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/fetch_model/{{model}}.tsv"
    resources:
        mem_mb=lambda wc: _model_spec(wc)["mem_mb"],
        runtime=60,
    script:
        "../scripts/fetch_model.py"

