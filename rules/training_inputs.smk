# Training: silver labels from a teacher, LoRA students (objective x lambda x seed), lambda selection.
#
# A trained variant carries a `student:` block; each value of its `lambda` list is one student
# `<variant>__lambda<L>`, trained once per seed. `select_lambda` picks OC-SFT's lambda on the
# held-out split only, as `student.lambda_rule` says for the train dataset's task (reranking:
# one standard error with a collapse floor; QA: the mean over seeds; responses: a fixed
# value); other objectives keep each seed's best held-out checkpoint.
#   teachers: {self: {kind: open_weight, model: smollm2, T: 4},
#              gpt:  {kind: hosted, provider: openai, base_url: ..., model: ..., api_key_env: OPENAI_API_KEY, T: 10}}
# Hosted calls are throttled cluster-wide with `--resources teacher_api=N`.

TEACHERS = CFG.usable_teachers  # name -> Teacher record
TRAINED = CFG.trained_variants  # name -> Variant record with a student


def _student_name(variant, lam):
    return f"{variant}__lambda{lam:g}"


STUDENTS = {_student_name(n, lam): (n, lam) for n, v in TRAINED.items() for lam in v.student.lambdas}


wildcard_constraints:
    teacher=alternatives(TEACHERS),
    student=alternatives(STUDENTS),
    seed=r"\d+",


def _model_dir(model):
    return f"resources/models/{model}"


def _teacher(wc):
    return TEACHERS[wc.teacher]


def _silver_inputs(wc):
    inputs = {"candidates": f"{RESULTS}/{wc.dataset}/candidates.parquet"}
    t = _teacher(wc)
    if t.open_weight:
        inputs["model_dir"] = _model_dir(t.model)
    return inputs


def _is_open_weight(wc):
    return _teacher(wc).open_weight


def _student(wc):
    """(variant name, lambda, Student record) of one student run."""
    variant, lam = STUDENTS[wc.student]
    return variant, lam, TRAINED[variant].student


def _training_settings(wc):
    """Every behavioural setting of one student run (the lambda list resolved to its value)."""
    variant, lam, _ = _student(wc)
    return CFG.student_run_settings(variant, lam)


def _train_inputs(wc):
    variant, lam, s = _student(wc)
    return {
        "silver": f"{RESULTS}/silver/{s.teacher}/{s.train}.parquet",
        "train_candidates": f"{RESULTS}/{s.train}/candidates.parquet",
        "train_qrels": f"{RESULTS}/{s.train}/qrels.parquet",
        "heldout_candidates": f"{RESULTS}/{s.heldout}/candidates.parquet",
        "heldout_qrels": f"{RESULTS}/{s.heldout}/qrels.parquet",
        "model_dir": _model_dir(TRAINED[variant].model),
    }


def _on_gpu(wc):
    return _student(wc)[2].device == "cuda"


def _selection_runs(wc):
    v = TRAINED[wc.variant]
    return [
        {"lambda": lam, "seed": seed, "dir": f"{RESULTS}/models/{_student_name(wc.variant, lam)}/seed{seed}"}
        for lam in v.student.lambdas
        for seed in v.student.seeds
    ]


_SELECTION_KEYS = ("lambda_rule", "lambda_fixed", "collapse_floor")


def _selection_settings(wc):
    """How a trained variant's lambda is chosen; the train dataset's task decides (OC-SFT only)."""
    s = TRAINED[wc.variant].student
    task = CFG.datasets[s.train].task
    which = s.spec["lambda_rule"][task] if s.objective == "oc_sft" else "checkpoint"
    return {"task": task, "rule": which, "converged_step": s.spec["lambda_warmup_steps"],
            "collapse_floor": s.spec["collapse_floor"], "fixed_lambda": s.spec["lambda_fixed"]}
