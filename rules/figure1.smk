# Figure 1: one query of the example run in two shuffles, and every variant by quality and stability.


localrules:
    figure1,


rule figure1:
    input:
        unpack(figure1_inputs),
        # t* and the test half of the example run: its threshold artifact, the one source of t*.
        thresholds=lambda wc: "{results}/thresholds/{variant}/{dataset}.json".format(results=RESULTS, **figure1_choice()),
        # the example run's stored Jaccard (and t*, checked against the artifact): its metrics file.
        example_metrics=lambda wc: "{results}/metrics/{variant}/{dataset}.parquet".format(results=RESULTS, **figure1_choice()),
    output:
        svg=report(f"{RESULTS}/figure1.svg", caption="report/figure1.rst", category="Figure 1"),
        png=f"{RESULTS}/figure1.png",
    params:
        variant=lambda wc: figure1_choice()["variant"],
        dataset=lambda wc: figure1_choice()["dataset"],
        labels={name: v.label for name, v in CFG.variants.items()},
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/figure1.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/figure1.py"
