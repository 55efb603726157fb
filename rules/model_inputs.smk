# Models: fetch once into a plain safetensors directory.


def _model_spec(wildcards):
    return thaw(CFG.model(wildcards.model))
