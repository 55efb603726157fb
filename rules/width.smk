# The fixed-weight width program (docs/methods/width.md): per pair of a dataset and its B = 1 alias
# (`width: {pairs: {<dataset>: <alias>}}`), the same weights' quality one document per forward
# against their native single pass (C_obs) and their K = 10 order average (V_B), per seed.

WIDTH = thaw(CFG.raw["width"])
WIDTH_DATASETS = [d for pair in WIDTH["pairs"].items() for d in pair]


localrules:
    width,


rule width:
    input:
        metrics=metrics_files(datasets=WIDTH_DATASETS),
    output:
        csv=f"{RESULTS}/width.csv",
        md=report(f"{RESULTS}/width.md", caption="report/width.rst", category="Decisions"),
    params:
        variants=CFG.variants_table(),
        pairs=WIDTH["pairs"],
        resamples=WIDTH["resamples"],
        seed=WIDTH["seed"],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/width.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=4000,
    script:
        "../scripts/width.py"
