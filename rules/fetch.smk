# Data acquisition for catalogue datasets (presdep/config/catalogue.yaml): each writes
# resources/datasets/<catalogue id>/ with a manifest.json. A dataset with local_path is
# verified and converted from those files; otherwise the original is downloaded
# (pyserini prebuilt index + bundled topics/qrels, Hugging Face at a pinned revision, or the
# release URL with a pinned sha256).
# Fetches are keyed by source: the `catalogue_id` wildcard is the fetch key, the id itself for
# the catalogue's own source and `<id>/local-<digest>` for a local copy (its paths and sizes,
# presdep.config.catalogue.fetch_key), so configs giving one entry different local files keep
# separate conversions and never re-fetch each other's. The dataset entries the expansion
# writes point at the same folders, so the rules that read fetched files need nothing else.
import sys

from presdep.config.catalogue import fetch_ids, fetch_jobs, fetch_local_inputs, fetch_outputs

FETCH_JOBS = fetch_jobs(CFG.datasets, overrides=CFG.catalogue_overrides)

# Catalogue datasets that cannot run here (not public, no local copy) are named at every start.
for _name, _reason in CFG.skipped_datasets.items():
    print(f"presdep: dataset {_name} skipped: {_reason}", file=sys.stderr)


rule fetch_dataset:
    input:
        lambda w: fetch_local_inputs(FETCH_JOBS, w.catalogue_id),
    output:
        candidates=fetch_outputs("{catalogue_id}", "ranked")["candidates"],
        qrels=fetch_outputs("{catalogue_id}", "ranked")["qrels"],
        manifest=fetch_outputs("{catalogue_id}", "ranked")["manifest"],
    wildcard_constraints:
        catalogue_id=fetch_ids(FETCH_JOBS, "ranked"),
    params:
        job=lambda w: FETCH_JOBS[w.catalogue_id],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/fetch_dataset/{{catalogue_id}}.log",
    threads: 4
    resources:
        # A prebuilt MS MARCO v1 index is ~2 GB to download; v2 ~39 GB.
        mem_mb=8000,
        runtime=240,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/fetch_dataset.py"


rule fetch_dataset_qa:
    input:
        lambda w: fetch_local_inputs(FETCH_JOBS, w.catalogue_id),
    output:
        questions=fetch_outputs("{catalogue_id}", "qa")["questions"],
        manifest=fetch_outputs("{catalogue_id}", "qa")["manifest"],
    wildcard_constraints:
        catalogue_id=fetch_ids(FETCH_JOBS, "qa"),
    params:
        job=lambda w: FETCH_JOBS[w.catalogue_id],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/fetch_dataset/{{catalogue_id}}.log",
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/fetch_dataset.py"


rule fetch_dataset_beir:
    input:
        lambda w: fetch_local_inputs(FETCH_JOBS, w.catalogue_id),
    output:
        corpus=fetch_outputs("{catalogue_id}", "beir")["corpus"],
        queries=fetch_outputs("{catalogue_id}", "beir")["queries"],
        qrels=fetch_outputs("{catalogue_id}", "beir")["qrels"],
        manifest=fetch_outputs("{catalogue_id}", "beir")["manifest"],
    wildcard_constraints:
        catalogue_id=fetch_ids(FETCH_JOBS, "beir"),
    params:
        job=lambda w: FETCH_JOBS[w.catalogue_id],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/fetch_dataset/{{catalogue_id}}.log",
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/fetch_dataset.py"


rule fetch_training_pool:
    input:
        lambda w: fetch_local_inputs(FETCH_JOBS, w.catalogue_id),
    output:
        **{k: v for k, v in fetch_outputs("{catalogue_id}", "pool_ranked").items()},
    wildcard_constraints:
        catalogue_id=fetch_ids(FETCH_JOBS, "pool_ranked"),
    params:
        job=lambda w: FETCH_JOBS[w.catalogue_id],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/fetch_dataset/{{catalogue_id}}.log",
    threads: 8
    resources:
        # MS MARCO train: BM25 top 100 for 30,000 queries over the prebuilt v1 index.
        mem_mb=16000,
        runtime=480,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/fetch_dataset.py"


rule fetch_training_pool_qa:
    input:
        lambda w: fetch_local_inputs(FETCH_JOBS, w.catalogue_id),
    output:
        **{k: v for k, v in fetch_outputs("{catalogue_id}", "pool_qa").items()},
    wildcard_constraints:
        catalogue_id=fetch_ids(FETCH_JOBS, "pool_qa"),
    params:
        job=lambda w: FETCH_JOBS[w.catalogue_id],
        version=PRESDEP_VERSION,
    log:
        f"{LOGS}/fetch_dataset/{{catalogue_id}}.log",
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        "../envs/retrieval.yaml"
    script:
        "../scripts/fetch_dataset.py"
