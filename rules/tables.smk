# Tables: the paper's Table 1 from every metrics file.


localrules:
    table1,
    figure1,


rule table1:
    input:
        metrics=metrics_files(),
    output:
        csv="results/table1.csv",
        md=report("results/table1.md", caption="report/table1.rst", category="Table 1"),
        counts="results/table1_counts.csv",
        bsc_curve="results/bsc_curve.csv",
    params:
        variants=config["variants"],
        skipped_datasets=config["skipped_datasets"],
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/table1.log",
    script:
        "../scripts/table1.py"


rule figure1:
    input:
        unpack(figure1_inputs),
        # t* and the test half of the example run: its threshold artifact, the one source of t*.
        thresholds=lambda wc: "results/thresholds/{variant}/{dataset}.json".format(**figure1_choice()),
    output:
        svg=report("results/figure1.svg", caption="report/figure1.rst", category="Figure 1"),
        png="results/figure1.png",
    params:
        variant=lambda wc: figure1_choice()["variant"],
        dataset=lambda wc: figure1_choice()["dataset"],
        version=PRESDEP_VERSION,
    log:
        "logs/figure1.log",
    conda:
        "../envs/cpu.yaml"
    script:
        "../scripts/figure1.py"
