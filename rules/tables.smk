# Tables: the paper's Table 1 and BSC's K-curve, each from every metrics file.


localrules:
    table1,
    controls_table,
    bsc_curve,


rule table1:
    input:
        metrics=metrics_files("table1"),
    output:
        csv=f"{RESULTS}/table1.csv",
        md=report(f"{RESULTS}/table1.md", caption="report/table1.rst", category="Table 1"),
        counts=f"{RESULTS}/table1_counts.csv",
    params:
        variants=CFG.variants_table(),
        skipped_datasets=thaw(CFG.skipped_datasets),
        departures=departures(CFG),
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        f"{LOGS}/table1.log",
    script:
        "../scripts/table1.py"


# Opt-in control rows (`table: controls`, e.g. PINE and the isolated-slots control): Table 1's
# columns for them alone, so they never shift Table 1 or the tables built on its rows.
rule controls_table:
    input:
        metrics=metrics_files("controls"),
    output:
        csv=f"{RESULTS}/controls.csv",
        md=report(f"{RESULTS}/controls.md", caption="report/controls.rst", category="Table 1"),
        counts=f"{RESULTS}/controls_counts.csv",
    params:
        variants=CONTROL_VARIANTS,
        skipped_datasets=thaw(CFG.skipped_datasets),
        departures=departures(CFG),
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        f"{LOGS}/controls_table.log",
    script:
        "../scripts/table1.py"


rule bsc_curve:
    input:
        metrics=metrics_files("table1"),
    output:
        csv=f"{RESULTS}/bsc_curve.csv",
    params:
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        f"{LOGS}/bsc_curve.log",
    script:
        "../scripts/bsc_curve.py"
