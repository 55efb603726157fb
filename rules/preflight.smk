# The preflight (`presdep preflight --configfile C --profile P`): one job on a GPU node that
# checks its software against the env pins, its memory against the plan, and measures one
# micro-job per GPU rule family with the config's own models. Never part of `all`; the command
# submits it with the profile's train_student resources (--set-resources preflight:...).

PREFLIGHT_MODELS = sorted(
    {CFG.variants[n].model for n in CFG.runnable_variants
     if CFG.variants[n].model and CFG.variants[n].scorer in ("transformers", "vllm")}
    | ({CFG.reader["model"]} if CFG.reader.get("model") else set())
)


rule preflight:
    input:
        models=[f"resources/models/{m}" for m in PREFLIGHT_MODELS],
    output:
        rates=f"{RESULTS}/preflight/rates.json",
    params:
        configfiles=" ".join(f"--configfile {c}" for c in workflow.overwrite_configfiles),
        version=PRESDEP_VERSION,
    conda:
        "../envs/gpu.yaml"
    log:
        f"{LOGS}/preflight/preflight.log",
    threads: 4
    resources:
        gpu=1,
        mem_mb=32000,
        runtime=60,
    shell:
        "presdep preflight --local {params.configfiles} --out {output.rates} > {log} 2>&1"
