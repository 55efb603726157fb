# First stage: BM25 over a Lucene index (pyserini/Anserini, Java >= 21).
# Applies to datasets whose config has
#   candidates: {format: bm25, corpus: SOURCE, topics: SOURCE, k, k1, b, index: NAME (optional)}
# with corpus SOURCE = {format: beir|jsonl|tsv|trec|rank_llm_json, path: ...} or {format: irds, id: ...}
# and topics SOURCE = {format: beir|jsonl|tsv|trec, path: ...} or {format: irds, id: ...}
# (schema $defs corpus_source / topics_source; the readers: presdep.data.corpus).
# Datasets naming the same `index` share one index (e.g. TREC DL19 and DL20 over MS MARCO);
# without it the index is named after the dataset.

rule build_index:
    input:
        corpus=lambda w: _index_corpus_files(w.index),
    output:
        index=directory("resources/indexes/{index}"),
    wildcard_constraints:
        index=alternatives(_BM25_INDEXES),
    params:
        version=PRESDEP_VERSION,
        corpus=lambda w: thaw(_BM25_INDEXES[w.index]),
    log:
        f"{LOGS}/build_index/{{index}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/build_index/{{index}}.tsv"
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
        index=lambda w: f"resources/indexes/{_index_name(w.dataset)}",
        topics=lambda w: _refuse_missing(w.dataset) or topics_files(w.dataset, _BM25_DATASETS[w.dataset]),
    output:
        first_stage=f"{RESULTS}/{{dataset}}/first_stage.parquet",
        trec=f"{RESULTS}/{{dataset}}/first_stage.trec",
        meta=f"{RESULTS}/{{dataset}}/dataset_meta.yaml",
    wildcard_constraints:
        dataset=alternatives(_BM25_DATASETS),
    params:
        version=PRESDEP_VERSION,
        corpus=lambda w: thaw(_BM25_DATASETS[w.dataset]["corpus"]),
        topics=lambda w: thaw(_BM25_DATASETS[w.dataset]["topics"]),
        bm25=_bm25_params,
    log:
        f"{LOGS}/retrieve/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/retrieve/{{dataset}}.tsv"
    threads: 4
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/retrieve.py"
