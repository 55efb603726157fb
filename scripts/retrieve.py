"""Snakemake adapter: rule retrieve -> presdep.retrieval.run_first_stage."""

import logging
import os
import sys

log_file = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 - injected by Snakemake
# fd-level redirect: the JVM writes to file descriptors 1/2 directly, not via sys.stderr.
os.dup2(log_file.fileno(), 2)
os.dup2(log_file.fileno(), 1)
sys.stderr = sys.stdout = log_file
logging.basicConfig(level=logging.INFO, stream=log_file, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

from presdep.retrieval import run_first_stage  # noqa: E402

p = snakemake.params  # noqa: F821
topics = p.topics
run_first_stage(
    index_dir=snakemake.input.index,  # noqa: F821
    topics_path=topics.get("id") or topics["path"],
    topics_format=topics["format"],
    out_parquet=snakemake.output.first_stage,  # noqa: F821
    out_trec=snakemake.output.trec,  # noqa: F821
    out_meta=snakemake.output.meta,  # noqa: F821
    k=p.bm25["k"],
    k1=p.bm25["k1"],
    b=p.bm25["b"],
    threads=snakemake.threads,  # noqa: F821
    topics_split=topics.get("split", "test"),
    topics_field=topics.get("field"),
    dataset=snakemake.wildcards.dataset,  # noqa: F821
    params={"presdep": p.presdep, "corpus": p.corpus, "topics": topics},
)
