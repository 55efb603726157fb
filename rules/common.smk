# Config validation, path helpers, the matrix, and wildcard constraints built from it.
import os
import re

from snakemake.utils import validate

import presdep
from presdep.config import (
    apply_replacing_sections,
    protocol_for,
    rule_params,
    runnable_variants,
    variant_config,
)

# Jobs in per-rule conda envs import presdep from this checkout (the envs carry its dependencies).
# (Setting it, not requiring it: the variable may be absent and that is fine.)
_inherited = [p for p in dict(os.environ).get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ.update(PYTHONPATH=os.pathsep.join([workflow.basedir, *_inherited]))

# A --configfile's datasets/variants/synthetic replace the embedded default's.
_resolved = apply_replacing_sections(config, workflow.overwrite_configfiles or [])
config.clear()
config.update(_resolved)
validate(config, "schemas/config.schema.yaml")

DATASETS = list(config["datasets"])
# Training and held-out splits are datasets too, but only `eval` datasets reach the table.
EVAL_DATASETS = [d for d in DATASETS if config["datasets"][d].get("role", "eval") == "eval"]
VARIANTS = runnable_variants(config)
# A scoring run: an untrained variant, or one training seed of a trained one ("oc_sft/seed1").
RUNS = {
    (f"{v}/seed{s}" if config["variants"][v].get("student") else v): (v, s if config["variants"][v].get("student") else None)
    for v in VARIANTS
    for s in (config["variants"][v].get("student") or {}).get("seeds", [None])
}
SYNTHETIC = list(config.get("synthetic") or {})
PRESDEP_VERSION = presdep.__version__
# Threads of model jobs (scoring, training, the CapCal prior). Locally Snakemake scales a
# job's threads down to --cores; on a cluster set-threads in the profile decides.
MODEL_THREADS = 8


def _alternatives(names):
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


wildcard_constraints:
    dataset=_alternatives(DATASETS),
    variant=_alternatives(RUNS),
    collection=_alternatives(SYNTHETIC),
    split="train|heldout|test",


def dataset_config(wildcards):
    return config["datasets"][wildcards.dataset]


def candidate_source_files(wildcards):
    """The input files a dataset's candidates come from (so Snakemake tracks them)."""
    src = config["datasets"][wildcards.dataset]["candidates"]
    fmt = src["format"]
    if fmt in ("rank_llm_json", "ircot_jsonl", "hotpotqa_json", "rm_bench_json", "responses_jsonl"):
        return {"candidates_src": src["path"]}
    if fmt == "trec_run":
        return {"run": src["run"]}
    if fmt == "bm25":
        return {"first_stage": f"results/{wildcards.dataset}/first_stage.parquet"}
    raise ValueError(f"dataset {wildcards.dataset}: unknown candidates format {fmt!r}")


def qrels_input(wildcards):
    """The qrels file to track ({} for ir_datasets ids, which live in ir_datasets' cache)."""
    src = config["datasets"][wildcards.dataset].get("qrels")
    if not src:  # self-judged candidates formats carry their own labels
        return {}
    return {} if src["format"] == "irds" else {"qrels_src": qrels_source_file(wildcards)}


def qrels_source_file(wildcards):
    src = config["datasets"][wildcards.dataset]["qrels"]
    if src["format"] == "beir":
        from presdep.data.beir import beir_qrels_path

        return str(beir_qrels_path(src["path"], src.get("split", "test")))
    return src["path"]


def _figure1_choice():
    """Figure 1's example: config `figure1: {variant, dataset}`, else the first model variant
    (the identity scorer never disagrees with itself) on the first reranking dataset."""
    chosen = dict(config.get("figure1") or {})
    if "dataset" not in chosen:
        rerank = [d for d in EVAL_DATASETS if config["datasets"][d]["task"] == "rerank"]
        chosen["dataset"] = (rerank or EVAL_DATASETS)[0]
    if "variant" not in chosen:
        models = [r for r, (v, _) in RUNS.items() if config["variants"][v]["scorer"] != "identity"]
        chosen["variant"] = (models or list(RUNS))[0]
    return chosen


FIGURE1 = _figure1_choice()


def metrics_files():
    return expand("results/metrics/{run}/{dataset}.parquet", run=list(RUNS), dataset=EVAL_DATASETS)


def run_variant(wildcards):
    """(variant name, training seed or None) of a scoring run."""
    return RUNS[wildcards.variant]


def metrics_inputs(wildcards):
    """scores + qrels; QA datasets add the reader's answers and the gold answers."""
    inputs = {
        "scores": f"results/scores/{wildcards.variant}/{wildcards.dataset}.parquet",
        "qrels": f"results/{wildcards.dataset}/qrels.parquet",
    }
    if config["datasets"][wildcards.dataset]["task"] == "qa":
        inputs["answers"] = f"results/answers/{wildcards.variant}/{wildcards.dataset}.parquet"
        inputs["gold"] = f"results/{wildcards.dataset}/answers_gold.parquet"
    return inputs


def score_inputs(wildcards):
    inputs = {
        "candidates": f"results/{wildcards.dataset}/candidates.parquet",
        "qrels": f"results/{wildcards.dataset}/qrels.parquet",
    }
    name, seed = run_variant(wildcards)
    v = config["variants"][name]
    model = v.get("model")
    if model:
        # Every model is fetched once into resources/models/<name> (a hub id downloads there).
        inputs["model_dir"] = f"resources/models/{model}"
    if v.get("student"):
        inputs["selected"] = f"results/models/{name}/selected.json"
    if v.get("calibration") == "capcal":
        B = protocol_for(config, wildcards.dataset)["B"]
        inputs["capcal_prior"] = f"results/capcal/{model}/B{B}.parquet"
    return inputs


def _scorer_of(wildcards):
    return config["variants"][run_variant(wildcards)[0]]["scorer"]


def _score_threads(wildcards):
    return 1 if _scorer_of(wildcards) in ("identity", "hosted") else MODEL_THREADS


# --- BM25 first stage (rules/retrieval.smk) ---
_BM25_DATASETS = {
    name: spec["candidates"]
    for name, spec in config.get("datasets", {}).items()
    if (spec.get("candidates") or {}).get("format") == "bm25"
}


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


def _alternatives_or_nothing(names):
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


def _bm25_source_input(src):
    """The local file or folder behind a corpus/topics source (none for ir_datasets ids)."""
    return [] if src["format"] == "irds" else [src["path"]]


def _bm25_params(wildcards):
    cand = _BM25_DATASETS[wildcards.dataset]
    missing = [key for key in ("k", "k1", "b", "topics") if key not in cand]
    if missing:
        raise ValueError(f"datasets.{wildcards.dataset}.candidates lacks {missing} (needed for bm25)")
    return {"k": int(cand["k"]), "k1": float(cand["k1"]), "b": float(cand["b"])}
