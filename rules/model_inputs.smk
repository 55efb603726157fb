# Models: fetch once into a plain safetensors directory; cache the CapCal prior per (model, B).


def _model_spec(wildcards):
    if wildcards.model not in config.get("models", {}):
        raise ValueError(f"model {wildcards.model!r} is not in config['models']")
    return config["models"][wildcards.model]


def _capcal_probe_dataset():
    # Content-free probes need only query texts; default: the first configured dataset.
    cc = config.get("capcal") or {}
    return cc.get("probe_dataset") or next(iter(config["datasets"]))
