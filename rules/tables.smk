# Tables: the paper's Table 1 from every metrics file.


localrules:
    table1,


rule table1:
    input:
        metrics=metrics_files(),
    output:
        csv="results/table1.csv",
        md=report("results/table1.md", caption="report/table1.rst", category="Table 1"),
        counts="results/table1_counts.csv",
    params:
        variants=config["variants"],
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/table1.log",
    script:
        "../scripts/table1.py"
