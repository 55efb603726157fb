"""Snakemake adapter: rule retrieve -> presdep.candidates.bm25.run_first_stage."""

import os
import sys

from presdep.candidates.bm25 import run_first_stage
from presdep.data.corpus import source_location
from presdep.runtime.logs import log_to_file

p = snakemake.params  # noqa: F821 - injected by Snakemake
where = f"datasets.{snakemake.wildcards.dataset}.candidates"  # noqa: F821
keys = {p.topics[k]: f"{where}.topics.{k}" for k in ("path", "id") if p.topics.get(k)}
log_to_file(snakemake.log[0], input_keys=keys)  # noqa: F821
os.dup2(sys.stderr.fileno(), 2)  # the in-process JVM writes to file descriptor 2 directly

topics = p.topics
run_first_stage(
    index_dir=snakemake.input.index,  # noqa: F821
    topics_path=source_location(topics),
    topics_format=topics["format"],
    out_parquet=snakemake.output.first_stage,  # noqa: F821
    out_trec=snakemake.output.trec,  # noqa: F821
    out_meta=snakemake.output.meta,  # noqa: F821
    k=p.bm25["k"],
    k1=p.bm25["k1"],
    b=p.bm25["b"],
    threads=snakemake.threads,  # noqa: F821
    topics_split=topics["split"],
    topics_field=topics.get("field"),
    dataset=snakemake.wildcards.dataset,  # noqa: F821
    params={"presdep": p.version, "corpus": p.corpus, "topics": topics},
)
