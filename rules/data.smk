# Data: the synthetic collections of the embedded default (real datasets are files named in the config).


rule generate_synthetic:
    output:
        expand(
            "resources/datasets/{{collection}}/{split}/{name}",
            split=["train", "heldout", "test"],
            name=["candidates.json", "qrels.txt", "topics.tsv"],
        ),
    params:
        spec=lambda wc: thaw(CFG.synthetic[wc.collection]),
        version=PRESDEP_VERSION,
        out_dir=lambda wc: f"resources/datasets/{wc.collection}",
    conda:
        "../envs/retrieval.yaml"
    log:
        f"{LOGS}/generate_synthetic/{{collection}}.log",
    script:
        "../scripts/generate_synthetic.py"


SYNTHETIC_TASKS = list(CFG.synthetic_tasks)


rule generate_synthetic_task:
    output:
        "resources/datasets/{taskset}/{split}/{kind}.jsonl",
    wildcard_constraints:
        taskset=alternatives(SYNTHETIC_TASKS),
        kind="questions|responses",
    params:
        spec=lambda wc: thaw(CFG.synthetic_tasks[wc.taskset]),
        version=PRESDEP_VERSION,
    conda:
        "../envs/retrieval.yaml"
    log:
        f"{LOGS}/generate_synthetic_task/{{taskset}}/{{split}}/{{kind}}.log",
    script:
        "../scripts/generate_synthetic_task.py"
