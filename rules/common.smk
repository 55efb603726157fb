# Config validation, path helpers, the matrix, and wildcard constraints built from it.
import re
from pathlib import Path

import presdep
from presdep.config import SCHEMA_PATH, apply_replacing_sections, load_workflow_config, thaw
from presdep.config.departures import departures, shared_permutation_datasets
from presdep.config.load import check_config_files
from presdep.config.light_rules import check_light_rules_ungrouped
from presdep.config.run_names import RESERVED_RUN_NAMES
from presdep.config.wildcards import alternatives
from presdep.candidates.inputs import corpus_files, dataset_files, missing_files, topics_files
from presdep.contracts.errors import ConfigError

# A --configfile's datasets/variants/synthetic replace the embedded default's. Validation
# fills every default from the schema (the only place defaults live) and refuses unknown
# keys, so a typo stops the workflow here, before any job runs. From here on the rules read
# the typed records in CFG only; `config` is refilled with the validated dict so that
# Snakemake's own config dump (--report, provenance) shows what ran.
check_config_files(workflow.configfiles)  # Snakemake's own YAML reading lets a repeated key pass
_filled, CFG = load_workflow_config(
    apply_replacing_sections(config, workflow.overwrite_configfiles or []),
    SCHEMA_PATH,
)
config.clear()
config.update(_filled)

DATASETS = list(CFG.datasets)
# Training and held-out splits are datasets too, but only `eval` datasets reach the table.
EVAL_DATASETS = CFG.eval_datasets
VARIANTS = CFG.runnable_variants
# A scoring run: an untrained variant, or one training seed of a trained one ("oc_sft/seed42").
RUNS = CFG.runs
SYNTHETIC = list(CFG.synthetic)
# The one rerun trigger besides each rule's settings: every rule has `version=PRESDEP_VERSION`
# in its params, and its behavioural settings as plain data (records' as_dict()) beside it,
# so `--rerun-triggers params` re-runs a job when either changes.
PRESDEP_VERSION = presdep.__version__
# Threads of model jobs (scoring, training, the CapCal prior, the reader). Locally Snakemake
# scales a job's threads down to --cores; on a cluster set-threads in the profile decides.
MODEL_THREADS = CFG.model_threads
# The light jobs (seconds of polars each). Under a cluster executor (light_rules: cluster) the
# metrics and the t* they read are submitted together in the group small_cpu (the profile says
# how many per sbatch: group-components); with light_rules: local (profiles/slurm-light-local)
# they run beside Snakemake, with no submission and no queue wait. Snakemake submits a grouped
# rule whatever localrules says, so a profile that still groups one of them is refused (the
# Snakefile's onstart).
LIGHT_RULES = ("metrics", "thresholds", "matched_reference")
LIGHT_GROUP = "small_cpu" if CFG.light_rules == "cluster" else None
if CFG.light_rules == "local":
    workflow.localrules(*LIGHT_RULES)
# Where this config's outputs go, the one prefix of every rule's results, benchmark and log
# paths: a config with a `name` writes under results/<name>/ and logs/<name>/, so runs of
# several configs in one checkout keep each its own Table 1; without one (the embedded
# default) results/ and logs/ themselves. What is fetched once or keyed by content stays
# shared by every run: resources/ (datasets, models, indexes, the read and answer caches)
# and the hosted teachers' reply cache (HOSTED_CACHE, keyed by the request).
RESULTS = f"results/{CFG.name}" if CFG.name else "results"
LOGS = f"logs/{CFG.name}" if CFG.name else "logs"
HOSTED_CACHE = "results/cache/hosted"


def unnamed_run_paths():
    """What an unnamed run writes directly under results/ (and anything inside its folders)."""
    names = sorted(RESERVED_RUN_NAMES - {"cache"})  # the hosted reply cache is shared by every config
    return "|".join(re.escape(n) + r"(?:/.+)?" for n in names)


def named_config_refusal(target):
    raise ValueError(f"this config is named {CFG.name!r}: its results are under {RESULTS}/, "
                     f"so ask for {RESULTS}/{target} instead of results/{target}")



wildcard_constraints:
    dataset=alternatives(DATASETS),
    variant=alternatives(RUNS),
    collection=alternatives(SYNTHETIC),
    split="train|heldout|test",


def _refuse_missing(dataset):
    """A user's file that is not there, named by its config key when a job needs it (dry runs too)."""
    missing = missing_files({dataset: CFG.datasets[dataset]})
    if missing:
        raise ConfigError("\n  ".join(missing))


def fixture_inputs(wildcards):
    """Every local file a dataset's fixture is read from (candidates or run, corpus, topics, qrels,
    query lists), so an edit of any of them re-runs the fixture and what depends on it; a BM25
    dataset's fixture reads its first-stage run (presdep.candidates.inputs)."""
    ds = CFG.datasets[wildcards.dataset]
    _refuse_missing(wildcards.dataset)
    inputs = {f.name: f.path for f in dataset_files(wildcards.dataset, ds.spec)}
    if ds.candidates["format"] == "bm25":
        inputs["first_stage"] = f"{RESULTS}/{wildcards.dataset}/first_stage.parquet"
    return inputs


def _figure1_choice():
    """Figure 1's example (a scoring run, an eval dataset), named in the config's `figure1`.

    Never guessed: without `figure1` the figure has no input and asking for it says so.
    """
    chosen = CFG.figure1
    if not chosen:
        return None
    missing = [k for k in ("variant", "dataset") if k not in chosen]
    if missing:
        raise ValueError(f"figure1: needs {missing} (a scoring run such as {next(iter(RUNS), 'off_the_shelf')!r} and an eval dataset)")
    if chosen["variant"] not in RUNS:
        raise ValueError(f"figure1.variant: {chosen['variant']!r} is not a scoring run of this config ({sorted(RUNS)})")
    if chosen["dataset"] not in EVAL_DATASETS:
        raise ValueError(f"figure1.dataset: {chosen['dataset']!r} is not an eval dataset of this config ({EVAL_DATASETS})")
    return dict(chosen)


def figure1_choice(wildcards=None):
    if FIGURE1 is None:
        raise ValueError(
            f"{RESULTS}/figure1.svg needs `figure1: {{variant: <scoring run>, dataset: <eval dataset>}}` in the config "
            f"(runs: {sorted(RUNS)}; eval datasets: {EVAL_DATASETS})"
        )
    return FIGURE1


def figure1_inputs(wildcards):
    chosen = figure1_choice()
    return {
        "metrics": metrics_files(),
        "scores": f"{RESULTS}/scores/{chosen['variant']}/{chosen['dataset']}.parquet",
        "qrels": f"{RESULTS}/{chosen['dataset']}/qrels.parquet",
    }


FIGURE1 = _figure1_choice()


# Eval datasets that are another dataset under other settings (alias_of: the width program's B = 1)
# never enter Table 1 or the tables built on its rows.
ALIAS_DATASETS = sorted(set(EVAL_DATASETS) - set(CFG.table1_datasets))


def metrics_files(table=None, datasets=None):
    """Every run's metrics files; with ``table`` (table1 | controls) those of the variants reported
    there on the datasets Table 1 averages (no alias); ``datasets`` narrows them further."""
    # A run covers the eval datasets of its variant's tasks only (a task's student, its own task).
    return [f"{RESULTS}/metrics/{run}/{ds}.parquet" for run, (name, _) in RUNS.items() for ds in EVAL_DATASETS
            if CFG.datasets[ds].task in CFG.variants[name].tasks
            and (table is None or (CFG.variants[name].spec["table"] == table and ds not in ALIAS_DATASETS))
            and (datasets is None or ds in datasets)]


# Rows of Table 1 and the tables built on them; opt-in control rows (`table: controls`) have their own.
TABLE1_VARIANTS = CFG.variants_table()
CONTROL_VARIANTS = CFG.variants_table("controls")
# The verdict reader's claims datasets (rules/verdicts.smk): reranking eval sets with gold verdicts.
VERDICT_DATASETS = [d for d in CFG.verdict_reader["datasets"] if d in EVAL_DATASETS]


def verdict_metrics_files():
    """One file per reranking run and claims dataset."""
    return [f"{RESULTS}/verdict_metrics/{run}/{ds}.parquet" for run, (name, _) in RUNS.items()
            for ds in VERDICT_DATASETS if "rerank" in CFG.variants[name].tasks and name in TABLE1_VARIANTS]


# The pool perturbation (rules/pool.smk): its datasets, and a fixed scorer's single pass: trained rows
# (one run per seed), calibrated and BSC rows have none.
POOL = thaw(CFG.raw["pool_perturbation"])
POOL_DATASETS = [d for d in POOL["datasets"] if d in EVAL_DATASETS]
POOL_RUNS = [run for run, (name, seed) in RUNS.items() if name in TABLE1_VARIANTS and seed is None
             and "rerank" in CFG.variants[name].tasks and CFG.variants[name].calibration == "none"
             and CFG.variants[name].bsc_k == 1]


def pool_metrics_files():
    return [f"{RESULTS}/pool_metrics/{run}/{ds}.parquet" for run in POOL_RUNS for ds in POOL_DATASETS]


# The context decomposition (rules/context.smk): its datasets, and the same single-pass rows as the pool
# perturbation whose scorer reads selected slots (or ranks: the identity row, every arm alike).
CONTEXT = thaw(CFG.raw["context_decomposition"])
CONTEXT_DATASETS = [d for d in CONTEXT["datasets"] if d in EVAL_DATASETS]
CONTEXT_RUNS = [run for run in POOL_RUNS if (CFG.variants[RUNS[run][0]].capabilities.slot_reads
                or CFG.variants[RUNS[run][0]].capabilities.reads == "ids")
                and (not CONTEXT["variants"] or RUNS[run][0] in CONTEXT["variants"])]


def context_metrics_files():
    return [f"{RESULTS}/context_metrics/{run}/{ds}.parquet" for run in CONTEXT_RUNS for ds in CONTEXT_DATASETS]


# The render perturbations (rules/render.smk): its datasets, and the single-pass rows whose scorer reads
# a prompt's render (capability slot_reads; the identity row reads ranks, not prompts).
RENDER = thaw(CFG.raw["render_perturbations"])
RENDER_DATASETS = [d for d in RENDER["datasets"] if d in EVAL_DATASETS]
RENDER_RUNS = [run for run in POOL_RUNS if CFG.variants[RUNS[run][0]].capabilities.slot_reads
               and (not RENDER["variants"] or RUNS[run][0] in RENDER["variants"])]


def render_metrics_files():
    return [f"{RESULTS}/render_metrics/{run}/{ds}.parquet" for run in RENDER_RUNS for ds in RENDER_DATASETS]


def matched_reference_files():
    """One file per trained run and reranking eval dataset whose seed has a single-order run."""
    return [f"{RESULTS}/matched/{run}/{ds}.parquet" for run, (name, seed) in RUNS.items() if seed is not None
            for ds in EVAL_DATASETS if CFG.datasets[ds].task == "rerank" and "rerank" in CFG.variants[name].tasks
            and CFG.single_order_run("rerank", seed)]


def matched_reference_of(wc):
    """The single-order run at the same training seed: the target's scores and threshold."""
    ref = CFG.single_order_run("rerank", run_variant(wc)[1])
    return {"ref_scores": f"{RESULTS}/scores/{ref}/{wc.dataset}.parquet",
            "ref_thresholds": f"{RESULTS}/thresholds/{ref}/{wc.dataset}.json"}


def final_outputs():
    """What a run delivers: Table 1 with its counts and BSC's K-curve, the stability analysis,
    the discordance, contrasts, matched-retention and verdict tables, every metrics file, the position profile, and Figure 1 where the config names its example
    (`rule all`, `make run`)."""
    return [
        f"{RESULTS}/table1.csv",
        f"{RESULTS}/table1.md",
        f"{RESULTS}/table1_counts.csv",
        f"{RESULTS}/bsc_curve.csv",
        f"{RESULTS}/stability/table1.json",
        f"{RESULTS}/discordance.md",
        f"{RESULTS}/contrasts.md",
        *([f"{RESULTS}/matched_retention.md"] if CFG.trained_variants else []),
        *([f"{RESULTS}/verdict_flip.md"] if VERDICT_DATASETS else []),
        *([f"{RESULTS}/controls.md"] if CONTROL_VARIANTS else []),
        *([f"{RESULTS}/width.md"] if CFG.raw["width"]["pairs"] else []),
        *([f"{RESULTS}/pool_perturbation.md"] if CFG.raw["pool_perturbation"]["datasets"] else []),
        *([f"{RESULTS}/context_decomposition.md"] if CONTEXT_DATASETS and CONTEXT_RUNS else []),
        *([f"{RESULTS}/render_perturbations.md"] if RENDER_DATASETS and RENDER_RUNS else []),
        *metrics_files(),
        f"{RESULTS}/position_profile.svg",
        *([f"{RESULTS}/figure1.svg"] if FIGURE1 else []),
    ]


def run_variant(wildcards):
    """(variant name, training seed or None) of a scoring run."""
    return RUNS[wildcards.variant]


def metrics_inputs(wildcards):
    """scores + qrels; QA datasets add the reader's answers and the gold answers."""
    inputs = {
        "scores": f"{RESULTS}/scores/{wildcards.variant}/{wildcards.dataset}.parquet",
        "qrels": f"{RESULTS}/{wildcards.dataset}/qrels.parquet",
    }
    if CFG.datasets[wildcards.dataset].task == "qa":
        inputs["answers"] = f"{RESULTS}/answers/{wildcards.variant}/{wildcards.dataset}.parquet"
        inputs["gold"] = f"{RESULTS}/{wildcards.dataset}/answers_gold.parquet"
    return inputs


def score_inputs(wildcards):
    inputs = {
        "candidates": f"{RESULTS}/{wildcards.dataset}/candidates.parquet",
        "qrels": f"{RESULTS}/{wildcards.dataset}/qrels.parquet",
    }
    name, seed = run_variant(wildcards)
    v = CFG.variants[name]
    if v.model:
        # Every model is fetched once into resources/models/<name> (a hub id downloads there).
        inputs["model_dir"] = f"resources/models/{v.model}"
    if v.student:
        inputs["selected"] = f"{RESULTS}/models/{name}/selected.json"
    if v.calibration == "capcal":
        # CapCal recalibrates another run's stored probabilities (only its probes are model work).
        source = v.reuse_scores_of
        if source not in RUNS or CFG.variants[source].calibration != "none":
            raise ValueError(f"variants.{name}.reuse_scores_of: {source!r} must be a runnable, untrained, "
                             f"uncalibrated variant (runs: {sorted(RUNS)})")
        inputs["reuse_scores"] = f"{RESULTS}/scores/{source}/{wildcards.dataset}.parquet"
    return inputs


def run_record(wildcards):
    """The variant record of a scoring run."""
    return CFG.variants[run_variant(wildcards)[0]]


def scorer_caps(wildcards):
    """The capability record of a scoring run's scorer: its env, threads and resources."""
    return run_record(wildcards).capabilities


def _score_threads(wildcards):
    return MODEL_THREADS if scorer_caps(wildcards).local_model else 1


# --- BM25 first stage (rules/retrieval.smk) ---
_BM25_DATASETS = {name: d.candidates for name, d in CFG.datasets.items() if d.candidates["format"] == "bm25"}


def _index_name(dataset):
    return str(_BM25_DATASETS[dataset].get("index", dataset))


_BM25_INDEXES = {}  # index name -> corpus source
for _ds in _BM25_DATASETS:
    _corpus = _BM25_DATASETS[_ds].get("corpus")
    if not _corpus:
        raise ValueError(f"datasets.{_ds}.candidates (format bm25) needs a corpus source")
    _name = _index_name(_ds)
    if _BM25_INDEXES.setdefault(_name, _corpus) != _corpus:
        raise ValueError(f"datasets sharing index {_name!r} name different corpora: {_BM25_INDEXES[_name]} vs {_corpus}")


def _index_corpus_files(index):
    """The corpus files an index is built from (none for ir_datasets ids; a BEIR folder's files)."""
    dataset = next(ds for ds in _BM25_DATASETS if _index_name(ds) == index)
    _refuse_missing(dataset)
    return corpus_files(dataset, _BM25_DATASETS[dataset])


def _bm25_params(wildcards):
    cand = _BM25_DATASETS[wildcards.dataset]
    missing = [key for key in ("k", "k1", "b", "topics") if key not in cand]
    if missing:
        raise ValueError(f"datasets.{wildcards.dataset}.candidates lacks {missing} (needed for bm25)")
    return {"k": cand["k"], "k1": cand["k1"], "b": cand["b"]}
