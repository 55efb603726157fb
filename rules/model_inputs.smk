# Models: fetch once into a plain safetensors directory.


def _model_spec(wildcards):
    if wildcards.model not in config["models"]:
        raise ValueError(f"model {wildcards.model!r} is not in config['models']")
    return config["models"][wildcards.model]

