# Training: silver labels, LoRA students (objective x lambda x seed), lambda selection.
# Helpers and the config they read: rules/training_inputs.smk.

# Picking lambda reads a few held-out summaries: seconds of work, never worth a cluster job.
localrules:
    select_lambda,


rule silver_labels:
    input:
        unpack(_silver_inputs),
    output:
        silver=f"{RESULTS}/silver/{{teacher}}/{{dataset}}.parquet",
    params:
        # Settings only: a hosted teacher names the environment variable of its key, never the key.
        teacher=lambda wc: _teacher(wc).as_dict(),
        protocol=lambda wc: CFG.datasets[wc.dataset].protocol.as_dict(),
        cache_dir=lambda wc: f"{HOSTED_CACHE}/{wc.teacher}",
        version=PRESDEP_VERSION,
    conda:
        lambda wc: "../envs/gpu.yaml" if _is_open_weight(wc) else "../envs/hosted.yaml"
    log:
        f"{LOGS}/silver_labels/{{teacher}}/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/silver_labels/{{teacher}}/{{dataset}}.tsv"
    threads: lambda wc: MODEL_THREADS if _is_open_weight(wc) else 1
    resources:
        mem_mb=lambda wc: 8000 if _is_open_weight(wc) else 2000,
        runtime=lambda wc: 240 if _is_open_weight(wc) else 600,
        gpu=lambda wc: 1 if _teacher(wc).on_gpu else 0,
        teacher_api=lambda wc: 0 if _is_open_weight(wc) else 1,
    script:
        "../scripts/silver_labels.py"


rule train_student:
    input:
        unpack(_train_inputs),
    output:
        # Checkpoints live beside these (checkpoints/), undeclared, so a killed job resumes.
        done=f"{RESULTS}/models/{{student}}/seed{{seed}}/done.json",
        train_log=f"{RESULTS}/models/{{student}}/seed{{seed}}/train_log.parquet",
        heldout=f"{RESULTS}/models/{{student}}/seed{{seed}}/heldout.parquet",
        adapter=directory(f"{RESULTS}/models/{{student}}/seed{{seed}}/adapter"),
    params:
        # Selection settings stay out: changing how lambda is chosen never retrains.
        student=lambda wc: {k: v for k, v in _training_settings(wc).items() if k not in _SELECTION_KEYS},
        variant=lambda wc: _student(wc)[0],
        protocol=lambda wc: CFG.datasets[_student(wc)[2].train].protocol.as_dict(),
        version=PRESDEP_VERSION,
    conda:
        "../envs/training.yaml"
    log:
        f"{LOGS}/train_student/{{student}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_student/{{student}}/seed{{seed}}.tsv"
    threads: lambda wc: 4 if _on_gpu(wc) else MODEL_THREADS
    resources:
        gpu=lambda wc: 1 if _on_gpu(wc) else 0,
        mem_mb=lambda wc: 32000 if _on_gpu(wc) else 8000,
        runtime=lambda wc: 720 if _on_gpu(wc) else 240,
    script:
        "../scripts/train_student.py"


rule select_lambda:
    input:
        runs=lambda wc: [f"{r['dir']}/done.json" for r in _selection_runs(wc)],
        heldout=lambda wc: [f"{r['dir']}/heldout.parquet" for r in _selection_runs(wc)],
    output:
        selected=f"{RESULTS}/models/{{variant}}/selected.json",
    wildcard_constraints:
        variant=alternatives(TRAINED),
    params:
        runs=_selection_runs,
        selection=_selection_settings,
        student=lambda wc: TRAINED[wc.variant].student.as_dict(),
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        f"{LOGS}/select_lambda/{{variant}}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/select_lambda.py"
