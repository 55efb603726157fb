# First stage: BM25 over a Lucene index (pyserini/Anserini, Java >= 21).
# Applies to datasets whose config has `candidates: {format: bm25, corpus: ..., topics: ..., k, k1, b}`;
# corpus/topics sources are {format: beir|jsonl|tsv|trec, path: ...} or {format: irds, id: ...}.

import re as _re

import presdep as _presdep

_BM25_DATASETS = [
    name
    for name, spec in config.get("datasets", {}).items()
    if (spec.get("candidates") or {}).get("format") == "bm25"
]
# Only bm25 datasets resolve to these rules; an empty list matches nothing.
_BM25_WILDCARD = "|".join(_re.escape(n) for n in _BM25_DATASETS) or "(?!)"


def _bm25_candidates(wildcards):
    return config["datasets"][wildcards.dataset]["candidates"]


def _bm25_source_input(kind):
    """The local file or folder behind a corpus/topics source (none for ir_datasets ids)."""

    def _input(wildcards):
        src = _bm25_candidates(wildcards)[kind]
        return [] if src["format"] == "irds" else [src["path"]]

    return _input


def _bm25_params(wildcards):
    cand = _bm25_candidates(wildcards)
    missing = [key for key in ("k", "k1", "b") if key not in cand]
    if missing:
        raise ValueError(f"datasets.{wildcards.dataset}.candidates lacks {missing} (needed for bm25)")
    return {"k": int(cand["k"]), "k1": float(cand["k1"]), "b": float(cand["b"])}


rule build_index:
    input:
        corpus=_bm25_source_input("corpus"),
    output:
        index=directory("resources/indexes/{dataset}"),
    wildcard_constraints:
        dataset=_BM25_WILDCARD,
    params:
        presdep=_presdep.__version__,
        corpus=lambda w: _bm25_candidates(w)["corpus"],
    log:
        "logs/build_index/{dataset}.log",
    benchmark:
        "benchmarks/out/build_index/{dataset}.tsv"
    threads: 4
    resources:
        # SciFact: ~15 s, < 2 GB; MS MARCO passage (8.8M): ~15 min on 8 threads, ~8 GB.
        mem_mb=8000,
        runtime=120,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/build_index.py"


rule retrieve:
    input:
        index="resources/indexes/{dataset}",
        topics=_bm25_source_input("topics"),
    output:
        first_stage="results/{dataset}/first_stage.parquet",
        trec="results/{dataset}/first_stage.trec",
        meta="results/{dataset}/dataset_meta.yaml",
    wildcard_constraints:
        dataset=_BM25_WILDCARD,
    params:
        presdep=_presdep.__version__,
        corpus=lambda w: _bm25_candidates(w)["corpus"],
        topics=lambda w: _bm25_candidates(w)["topics"],
        bm25=_bm25_params,
    log:
        "logs/retrieve/{dataset}.log",
    benchmark:
        "benchmarks/out/retrieve/{dataset}.tsv"
    threads: 4
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/retrieve.py"
