"""Data acquisition for catalogue entries: download (or read a local copy of) the original
files, verify them, and convert them into formats the fixture builder already reads.

One small module per source family; :mod:`presdep.data.fetch.run` dispatches on the entry.
Outputs (all written atomically, with a ``manifest.json``):

- reranking and response ranking: ``candidates.json`` (rank_llm JSON list) + ``qrels.txt`` (TREC);
- multi-document QA: ``questions.jsonl`` (IRCoT's processed JSONL, with gold answers);
- a local BEIR folder: ``beir/{corpus.jsonl,queries.jsonl,qrels/test.tsv}`` for our own index;
- training pools: the same per split, under ``train/``, ``heldout/`` and ``dev/``.
"""
