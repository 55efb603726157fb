# Data: the synthetic collections of the embedded default (real datasets are files named in the config).


rule generate_synthetic:
    output:
        expand(
            "resources/datasets/{{collection}}/{split}/{name}",
            split=["train", "heldout", "test"],
            name=["candidates.json", "qrels.txt", "topics.tsv"],
        ),
    params:
        spec=lambda wc: rule_params(config["synthetic"][wc.collection]),
        out_dir=lambda wc: f"resources/datasets/{wc.collection}",
    conda:
        "../envs/retrieval.yaml"
    log:
        "logs/generate_synthetic/{collection}.log",
    script:
        "../scripts/generate_synthetic.py"


SYNTHETIC_TASKS = list(config["synthetic_tasks"])


rule generate_synthetic_task:
    output:
        "resources/datasets/{taskset}/{split}/{kind}.jsonl",
    wildcard_constraints:
        taskset="|".join(re.escape(n) for n in SYNTHETIC_TASKS) or "(?!x)x",
        kind="questions|responses",
    params:
        spec=lambda wc: rule_params(config["synthetic_tasks"][wc.taskset]),
    conda:
        "../envs/retrieval.yaml"
    log:
        "logs/generate_synthetic_task/{taskset}/{split}/{kind}.log",
    script:
        "../scripts/generate_synthetic_task.py"
