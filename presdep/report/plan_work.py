"""Every job a config's ``results/table1.csv`` takes, with the model work each reads (``presdep plan``).

The jobs are the workflow's, counted from the config as the rules build them (rules/*.smk):
one score job per (scoring run, eval dataset of its tasks), one silver_labels job per
(teacher, training dataset), one train_student job per (student, lambda, seed), one read_answers
job per (run, QA dataset), and the CPU rules around them. A model job carries its
:class:`Part` s: prefill reads on a readout path, LoRA training, greedy generation.

With the read cache on, a scorer that reads probabilities reads a prompt once per model,
adapter and template: the runs of one dataset that share a scorer, model and chunking (off the
shelf, BSC, CapCal's source) read the union of their presentations once, charged to the run
with the most shuffles; noise re-reads bypass the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from presdep.config.catalogue import fetch_jobs
from presdep.config.records import Dataset, TrainingSettings, WorkflowConfig, thaw
from presdep.report.plan_sizes import (
    DatasetSize,
    Load,
    decode_steps,
    pair_load,
    pass_load,
    probe_load,
    reader_load,
    score_load,
    silver_load,
)
from presdep.scoring.generative_listwise import windows
from presdep.scoring.run import shuffle_count
from presdep.training.micro_batches import checkpointing_on

# rule -> stage, in the order the cluster guide runs them.
STAGES = {
    "fetch": ("fetch_dataset", "fetch_dataset_qa", "fetch_dataset_beir", "fetch_training_pool",
              "fetch_training_pool_qa", "fetch_model", "generate_synthetic", "generate_synthetic_task",
              "build_index", "retrieve", "build_fixture"),
    "silver": ("silver_labels",),
    "train": ("train_student", "select_lambda"),
    "score": ("score",),
    "reader": ("read_answers",),
    "tables": ("metrics", "thresholds", "table1"),
}
STAGE_OF = {rule: stage for stage, rules in STAGES.items() for rule in rules}
# The scorer whose class re-reads in other batches (TransformersScorer.reread_in_batches): only
# its jobs take protocol.noise_rereads (presdep.scoring.run.measures_noise).
NOISE_SCORERS = ("transformers",)
POINTWISE_SCORERS = ("mxbai_rerank", "cross_encoder", "reward_model")
FETCH_RULES = {"ranked": "fetch_dataset", "qa": "fetch_dataset_qa", "beir": "fetch_dataset_beir",
               "pool_ranked": "fetch_training_pool", "pool_qa": "fetch_training_pool_qa"}


@dataclass(frozen=True)
class Part:
    """Model work of one kind: ``readout`` (a prefill on ``path``), ``train`` (LoRA steps) or
    ``decode`` (``steps`` greedy steps of ``new_tokens`` per prompt, after ``load``'s prompts)."""

    kind: str
    load: Load
    path: str = "slot"
    steps: int = 0
    new_tokens: int = 0
    checkpointing: bool = False


@dataclass(frozen=True)
class Job:
    rule: str
    job: str
    device: str                  # gpu | cpu | api
    model: str | None = None     # the models entry whose shape prices its parts
    parts: tuple[Part, ...] = ()
    prompts: int = 0             # as the code lays them out (the read cache may answer some)
    exact: bool = True           # prompts counted from the candidates files (or no prompts at all)
    source: str = ""
    known: bool = True           # False: a dataset's size is unknown, its work is not counted
    basis: str = "no prompts"    # what its prompt count rests on, in a few words

    @property
    def stage(self) -> str:
        return STAGE_OF[self.rule]


Sizes = Callable[[str], DatasetSize]


def plan_jobs(cfg: WorkflowConfig, size_of: Sizes) -> list[Job]:
    """Every job of ``cfg``'s results/table1.csv, model work included."""
    return [*_fetch_jobs(cfg), *_silver_jobs(cfg, size_of), *_train_jobs(cfg, size_of), *_score_jobs(cfg, size_of),
            *_reader_jobs(cfg, size_of), *_table_jobs(cfg)]


# ---------------------------------------------------------------- what runs where


def _runs_of(cfg: WorkflowConfig, task: str | None = None) -> list[tuple[str, str]]:
    """(scoring run, eval dataset) pairs of Table 1's plan: each run on the datasets Table 1 averages of
    its variant's tasks (an alias is the appendix programs', not Table 1's)."""
    return [(run, ds) for run, (name, _) in cfg.runs.items() for ds in cfg.table1_datasets
            if cfg.datasets[ds].task in cfg.variants[name].tasks and task in (None, cfg.datasets[ds].task)]


def _used_datasets(cfg: WorkflowConfig) -> list[str]:
    used = {ds for _, ds in _runs_of(cfg)}
    for v in cfg.trained_variants.values():
        used |= {v.student.train, v.student.heldout} - {None}
    return [d for d in cfg.datasets if d in used]


def _model_device(entry: Mapping[str, Any], needs_gpu: bool = False) -> str:
    return "gpu" if needs_gpu or entry.get("device") == "cuda" else "cpu"


def _reader(cfg: WorkflowConfig) -> dict:
    """The reader's settings as rules/reader.smk gives them: the model entry's device and dtype
    unless the reader section sets its own."""
    reader = thaw(cfg.reader)
    entry = thaw(cfg.model(reader["model"])) if reader.get("model") else {}
    return {**{k: entry[k] for k in ("device", "dtype") if k in entry}, **reader}


def _basis(*sizes: DatasetSize, what: str = "") -> str:
    where = "candidates files" if all(s.exact for s in sizes) else "catalogue sizes"
    return f"{what}{where}" if all(s.known for s in sizes) else "unknown size: not counted"


def _cpu(rule: str, job: str, source: str = "CPU only") -> Job:
    return Job(rule, job, "cpu", source=source)


# ---------------------------------------------------------------- fetch and tables (CPU)


def _fetch_jobs(cfg: WorkflowConfig) -> list[Job]:
    used = _used_datasets(cfg)
    datasets = {d: cfg.datasets[d] for d in used}
    out = [_cpu(FETCH_RULES[j["layout"]], cid, "CPU only: downloads and conversion")
           for cid, j in fetch_jobs(datasets, overrides=cfg.catalogue_overrides).items()]
    out += [_cpu("fetch_model", m, "CPU only: a download") for m in _fetched_models(cfg)]
    bm25 = {d: cfg.datasets[d].candidates for d in used if cfg.datasets[d].candidates["format"] == "bm25"}
    out += [_cpu("build_index", i) for i in dict.fromkeys(c["index"] for c in bm25.values())]
    out += [_cpu("retrieve", d) for d in bm25]
    paths = [str(cfg.datasets[d].candidates.get("path", "")) for d in used]
    out += [_cpu("generate_synthetic", c) for c in cfg.synthetic if any(f"/{c}/" in p for p in paths)]
    out += [_cpu("generate_synthetic_task", p) for p in paths for t in cfg.synthetic_tasks if f"/{t}/" in p]
    out += [_cpu("build_fixture", d) for d in used]
    return out


def _fetched_models(cfg: WorkflowConfig) -> list[str]:
    """Models a job reads from resources/models/: each runnable row's, the reader's, the teachers'."""
    models = [cfg.variants[n].model for n in cfg.runnable_variants if cfg.variants[n].model]
    if cfg.datasets_of_task("qa") and cfg.reader.get("model"):
        models.append(cfg.reader["model"])
    teachers = {v.student.teacher for v in cfg.trained_variants.values()}
    models += [cfg.usable_teachers[t].model for t in teachers if cfg.usable_teachers[t].open_weight]
    return list(dict.fromkeys(models))


def _table_jobs(cfg: WorkflowConfig) -> list[Job]:
    out = [_cpu("metrics", f"{run}/{ds}") for run, ds in _runs_of(cfg)]
    out += [_cpu("thresholds", f"{run}/{ds}") for run, ds in _runs_of(cfg, "rerank")]
    return out + [_cpu("table1", "table1")]


# ---------------------------------------------------------------- silver labels and training


def _silver_jobs(cfg: WorkflowConfig, size_of: Sizes) -> list[Job]:
    out = []
    pairs = dict.fromkeys((v.student.teacher, v.student.train) for v in cfg.trained_variants.values())
    for teacher, train in pairs:
        t, size = cfg.usable_teachers[teacher], size_of(train)
        load = silver_load(size, t.T, cfg.datasets[train].protocol)
        job = f"{teacher}/{train}"
        if not t.open_weight:
            out.append(Job("silver_labels", job, "api", prompts=load.prompts, exact=size.exact,
                           source=f"hosted teacher: its API, not our GPUs; {size.source}", known=size.known,
                           basis=_basis(size)))
            continue
        device = "gpu" if t.on_gpu else "cpu"
        out.append(Job("silver_labels", job, device, t.model, (Part("readout", load),), load.prompts, size.exact,
                       f"T = {t.T} shuffles, contiguous chunks (presdep.training.silver); {size.source}", size.known,
                       _basis(size)))
    return out


def _train_jobs(cfg: WorkflowConfig, size_of: Sizes) -> list[Job]:
    out = []
    for name, v in cfg.trained_variants.items():
        st = v.student
        train, heldout = size_of(st.train), (size_of(st.heldout) if st.heldout else None)
        per_prompt = pass_load(train, cfg.datasets[st.train].protocol).mean_tokens
        for lam in st.lambdas:
            s = TrainingSettings.from_dict(cfg.student_run_settings(name, lam))
            views = 2 if s.objective == "oc_sft" else 1
            prompts = int(s.steps) * int(s.batch_chunks) * views
            parts = [Part("train", Load.of([(prompts, prompts * per_prompt)]),
                          checkpointing=checkpointing_on(s, "cuda"))]
            if heldout is not None:
                every = int(s.eval_every or s.checkpoint_every)
                evals = int(s.steps) // every + (1 if int(s.steps) % every else 0)
                parts.append(Part("readout", pass_load(heldout, cfg.datasets[st.heldout].protocol).times(evals)))
            sizes = [train] + ([heldout] if heldout else [])
            source = (f"steps x batch_chunks x {views} view(s) at the training set's mean first-stage prompt, "
                      f"+ held-out first-stage passes every {s.eval_every or s.checkpoint_every} steps; "
                      + "; ".join(z.source for z in sizes))
            for seed in st.seeds:
                out.append(Job("train_student", f"{name}__lambda{lam:g}/seed{seed}", "gpu" if s.device == "cuda"
                               else "cpu", v.model, tuple(parts), sum(p.load.prompts for p in parts),
                               all(z.exact for z in sizes), source, all(z.known for z in sizes),
                               _basis(*sizes, what="steps x chunks x views; held-out passes from ")))
        out += [_cpu("select_lambda", name, "CPU only: held-out summaries")]
    return out


# ---------------------------------------------------------------- scoring and the reader


def readout_path(scorer: str, spec: Mapping[str, Any], entry: Mapping[str, Any]) -> str:
    """The readout path a scorer's prefill runs: vLLM's ``readout`` option (the model entry's over
    the variant's; default pooling) or the slot-only readout of every other scorer."""
    if scorer != "vllm":
        return "slot"
    readout = {**spec, **entry}["readout"]  # as the vllm factory reads it; the schema fills the default
    return "full_vocab" if readout == "logprobs" else "grade_rows"


def _score_jobs(cfg: WorkflowConfig, size_of: Sizes) -> list[Job]:
    jobs, shared = [], {}
    for run, ds in _runs_of(cfg):
        name, _ = cfg.runs[run]
        v, d = cfg.variants[name], cfg.datasets[ds]
        job, key = _score_job(cfg, run, v, d, size_of(ds))
        jobs.append(job)
        if key is not None:
            shared.setdefault(key, []).append(len(jobs) - 1)
    for members in shared.values():
        _share(jobs, members, cfg, size_of)
    return jobs


def _score_job(cfg: WorkflowConfig, run: str, v: Any, d: Dataset, size: DatasetSize) -> tuple[Job, tuple | None]:
    caps, p, label = v.capabilities, d.protocol, f"{run}/{d.name}"
    noise = v.scorer in NOISE_SCORERS and p.noise_rereads >= 2
    base, reread, _ = score_load(size, v, p, noise=noise)
    laid_out = base.prompts + reread.prompts
    common = dict(prompts=laid_out, exact=size.exact, known=size.known, basis=_basis(size))
    if caps.reads == "ids" or not caps.needs_model:
        why = "reads first-stage ranks: no model" if caps.reads == "ids" else "hosted API: not our GPUs"
        return Job("score", label, "cpu" if caps.reads == "ids" else "api", source=f"{why}; {size.source}",
                   **common), None
    entry = thaw(cfg.model(v.model))
    device, path = _model_device(entry, caps.needs_gpu), readout_path(v.scorer, v.spec, entry)
    if v.calibration == "capcal":
        probes = probe_load(size, v, p)
        return Job("score", label, device, v.model, (Part("readout", probes, path),), probes.prompts, size.exact,
                   f"CapCal: content-free probes only, one per query and prompt size; {size.source}",
                   size.known, _basis(size)), None
    if v.scorer in POINTWISE_SCORERS or v.scorer == "pairrm":
        pairs = pair_load(size, ordered_pairs=v.scorer == "pairrm")
        what = "each ordered pair of responses once (at most n(n-1))" if v.scorer == "pairrm" else \
            "each distinct (query, document) pair once"
        return Job("score", label, device, v.model, (Part("readout", pairs),), laid_out, size.exact,
                   f"{what}; {size.source}", size.known, _basis(size)), None
    parts = [Part("readout", base, path), Part("readout", reread, path)]
    source = f"first-stage pass + shuffles as score_dataset lays them out; {size.source}"
    if v.scorer == "generative_listwise":
        win = len(windows(p.B, int(v.spec["window"]), int(v.spec["stride"])))  # the validated config's
        new = int(v.spec["max_new_tokens"])
        parts.append(Part("decode", Load.of([(base.prompts * win, base.tokens * win)]), steps=decode_steps(
            base.prompts * win, int(entry["batch_size"]), new), new_tokens=new))
        source = f"prefill + {win} window(s) a prompt generating up to {new} tokens each; {size.source}"
    key = None
    if cfg.read_cache.enabled and caps.probabilities:
        key = (v.scorer, v.model, path, run if v.student else None, v.chunking, d.name)
    return Job("score", label, device, v.model, tuple(parts), laid_out, size.exact, source, size.known,
               _basis(size)), key


def _share(jobs: list[Job], members: list[int], cfg: WorkflowConfig, size_of: Sizes) -> None:
    """The read cache: one member (the most shuffles) reads the union, the others only their
    noise re-reads."""
    if len(members) < 2:
        return
    runs = [cfg.variants[cfg.runs[jobs[i].job.rsplit("/", 1)[0]][0]] for i in members]
    ds = cfg.datasets[jobs[members[0]].job.rsplit("/", 1)[1]]
    first = max(range(len(members)), key=lambda k: shuffle_count(runs[k], ds.protocol))
    for k, i in enumerate(members):
        if k != first:
            job = jobs[i]
            kept = job.parts[1:]  # the noise re-reads
            jobs[i] = Job(job.rule, job.job, job.device, job.model, kept, job.prompts, job.exact,
                          f"read cache: presentations shared with {jobs[members[first]].job}; " + job.source,
                          job.known, job.basis)


def _reader_jobs(cfg: WorkflowConfig, size_of: Sizes) -> list[Job]:
    reader = _reader(cfg)
    if not reader.get("model"):
        return []
    out = []
    k, batch, new = int(reader["k"]), int(reader["batch_size"]), int(reader["max_new_tokens"])
    for run, ds in _runs_of(cfg, "qa"):
        v, size = cfg.variants[cfg.runs[run][0]], size_of(ds)
        load = reader_load(size, v, cfg.datasets[ds].protocol, k)
        parts = (Part("readout", load), Part("decode", load, steps=decode_steps(load.prompts, batch, new),
                                             new_tokens=new))
        out.append(Job("read_answers", f"{run}/{ds}", "gpu" if reader.get("device") == "cuda" else "cpu",
                       reader["model"], parts, load.prompts, False,
                       f"at most one prompt per presentation read (identical top-{k} prompts are generated "
                       f"once), up to {new} new tokens each; {size.source}", size.known,
                       _basis(size, what="an upper bound from ")))
    return out


__all__ = ["Job", "NOISE_SCORERS", "Part", "STAGES", "STAGE_OF", "plan_jobs", "readout_path"]
