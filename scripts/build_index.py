"""Snakemake adapter: rule build_index -> presdep.candidates.bm25.build_index."""

import os
import sys

from presdep.candidates.bm25 import build_index
from presdep.data.corpus import source_location
from presdep.runtime.logs import log_to_file

corpus = snakemake.params.corpus  # noqa: F821 - injected by Snakemake
# An index may serve several datasets: the key names the index's corpus entry of any of them.
index = snakemake.wildcards.index  # noqa: F821
keys = {corpus[k]: f"candidates.corpus.{k} (of the datasets indexed as {index!r})" for k in ("path", "id") if corpus.get(k)}
log_to_file(snakemake.log[0], input_keys=keys)  # noqa: F821
os.dup2(sys.stderr.fileno(), 2)  # the in-process JVM writes to file descriptor 2 directly

build_index(
    corpus_path=source_location(corpus),
    corpus_format=corpus["format"],
    index_dir=snakemake.output.index,  # noqa: F821
    threads=snakemake.threads,  # noqa: F821
)
