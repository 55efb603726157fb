# Training: silver labels from a teacher, LoRA students (objective x lambda x seed), lambda selection.
#
# A trained variant carries a `student:` block; each value of its `lambda` list is one student
# `<variant>__lambda<L>`, trained once per seed. `select_lambda` picks, on the held-out split only,
# the largest lambda within one standard error of the best, at its earliest best checkpoint.
#   teachers: {self: {kind: open_weight, model: smollm2, T: 4},
#              gpt:  {kind: hosted, provider: openai, base_url: ..., model: ..., api_key_env: OPENAI_API_KEY, T: 10}}
# Hosted calls are throttled cluster-wide with `--resources teacher_api=N`.

import re as _tre

TEACHERS = {k: v for k, v in (config.get("teachers") or {}).items() if not v.get("skip")}
TRAINED = {
    name: v for name, v in config["variants"].items() if v.get("student") and not v.get("skip")
}
_STUDENT_KEYS_OUTSIDE_TRAINING = ("teacher", "train", "heldout", "seeds", "lambda")


def _lambdas(v):
    lam = v["student"].get("lambda", 0.0)
    return [float(x) for x in (lam if isinstance(lam, list) else [lam])]


def _student_name(variant, lam):
    return f"{variant}__lambda{lam:g}"


STUDENTS = {_student_name(n, lam): (n, lam) for n, v in TRAINED.items() for lam in _lambdas(v)}


def _talt(names):
    return "|".join(_tre.escape(n) for n in names) or "(?!x)x"


wildcard_constraints:
    teacher=_talt(TEACHERS),
    student=_talt(STUDENTS),
    seed=r"\d+",


def _model_dir(model):
    return f"resources/models/{model}"


def _teacher(wc):
    return TEACHERS[wc.teacher]


def _silver_inputs(wc):
    inputs = {"candidates": f"results/{wc.dataset}/candidates.parquet"}
    t = _teacher(wc)
    if t["kind"] == "open_weight":
        inputs["model_dir"] = _model_dir(t["model"])
    return inputs


def _is_open_weight(wc):
    return _teacher(wc)["kind"] == "open_weight"


rule silver_labels:
    input:
        unpack(_silver_inputs),
    output:
        silver="results/silver/{teacher}/{dataset}.parquet",
    params:
        # Settings only: a hosted teacher names the environment variable of its key, never the key.
        teacher=lambda wc: _teacher(wc),
        protocol=lambda wc: protocol_for(config, wc.dataset),
        cache_dir=lambda wc: f"results/cache/hosted/{wc.teacher}",
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/silver_labels/{teacher}/{dataset}.log",
    benchmark:
        "benchmarks/out/silver_labels/{teacher}/{dataset}.tsv"
    threads: lambda wc: workflow.cores if _is_open_weight(wc) else 1
    resources:
        mem_mb=lambda wc: 8000 if _is_open_weight(wc) else 2000,
        runtime=lambda wc: 240 if _is_open_weight(wc) else 600,
        gpu=lambda wc: 1 if _is_open_weight(wc) and _teacher(wc).get("device") == "cuda" else 0,
        teacher_api=lambda wc: 0 if _is_open_weight(wc) else 1,
    script:
        "../scripts/silver_labels.py"


def _student(wc):
    variant, lam = STUDENTS[wc.student]
    return variant, lam, TRAINED[variant]["student"]


def _training_settings(wc):
    """Every behavioural setting of one student run (the lambda list resolved to its value)."""
    variant, lam, s = _student(wc)
    out = {k: v for k, v in s.items() if k not in _STUDENT_KEYS_OUTSIDE_TRAINING}
    out["lambda"] = lam
    out["teacher"] = s["teacher"]
    out["teacher_spec"] = TEACHERS[s["teacher"]]
    out["train"], out["heldout"] = s["train"], s["heldout"]
    return out


def _train_inputs(wc):
    variant, lam, s = _student(wc)
    return {
        "silver": f"results/silver/{s['teacher']}/{s['train']}.parquet",
        "train_candidates": f"results/{s['train']}/candidates.parquet",
        "train_qrels": f"results/{s['train']}/qrels.parquet",
        "heldout_candidates": f"results/{s['heldout']}/candidates.parquet",
        "heldout_qrels": f"results/{s['heldout']}/qrels.parquet",
        "model_dir": _model_dir(TRAINED[variant]["model"]),
    }


def _on_gpu(wc):
    return _student(wc)[2].get("device") == "cuda"


rule train_student:
    input:
        unpack(_train_inputs),
    output:
        # Checkpoints live beside these (checkpoints/), undeclared, so a killed job resumes.
        done="results/models/{student}/seed{seed}/done.json",
        train_log="results/models/{student}/seed{seed}/train_log.parquet",
        heldout="results/models/{student}/seed{seed}/heldout.parquet",
        adapter=directory("results/models/{student}/seed{seed}/adapter"),
    params:
        student=_training_settings,
        variant=lambda wc: _student(wc)[0],
        protocol=lambda wc: protocol_for(config, _student(wc)[2]["train"]),
        version=PRESDEP_VERSION,
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/train_student/{student}/seed{seed}.log",
    benchmark:
        "benchmarks/out/train_student/{student}/seed{seed}.tsv"
    threads: lambda wc: 4 if _on_gpu(wc) else workflow.cores
    resources:
        gpu=lambda wc: 1 if _on_gpu(wc) else 0,
        mem_mb=lambda wc: 32000 if _on_gpu(wc) else 8000,
        runtime=lambda wc: 720 if _on_gpu(wc) else 240,
    script:
        "../scripts/train_student.py"


def _selection_runs(wc):
    v = TRAINED[wc.variant]
    seeds = [int(x) for x in v["student"].get("seeds", [1])]
    return [
        {"lambda": lam, "seed": seed, "dir": f"results/models/{_student_name(wc.variant, lam)}/seed{seed}"}
        for lam in _lambdas(v)
        for seed in seeds
    ]


rule select_lambda:
    input:
        runs=lambda wc: [f"{r['dir']}/done.json" for r in _selection_runs(wc)],
        heldout=lambda wc: [f"{r['dir']}/heldout.parquet" for r in _selection_runs(wc)],
    output:
        selected="results/models/{variant}/selected.json",
    wildcard_constraints:
        variant=_talt(TRAINED),
    params:
        runs=_selection_runs,
        meta=lambda wc: rule_params(TRAINED[wc.variant]["student"]),
    conda:
        "../envs/cpu.yaml"
    log:
        "logs/select_lambda/{variant}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/select_lambda.py"
