"""Snakemake adapter: rule build_index -> presdep.retrieval.build_index."""

import logging
import os
import sys

log_file = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 - injected by Snakemake
# fd-level redirect: the JVM writes to file descriptors 1/2 directly, not via sys.stderr.
os.dup2(log_file.fileno(), 2)
os.dup2(log_file.fileno(), 1)
sys.stderr = sys.stdout = log_file
logging.basicConfig(level=logging.INFO, stream=log_file, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

from presdep.retrieval import build_index  # noqa: E402

corpus = snakemake.params.corpus  # noqa: F821
build_index(
    corpus_path=corpus.get("id") or corpus["path"],
    corpus_format=corpus["format"],
    index_dir=snakemake.output.index,  # noqa: F821
    threads=snakemake.threads,  # noqa: F821
)
