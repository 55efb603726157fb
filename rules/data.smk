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
        "../envs/cpu.yaml"
    log:
        "logs/generate_synthetic/{collection}.log",
    script:
        "../scripts/generate_synthetic.py"
