"""The verdict reader: a frozen chat model judges each claim from each presentation's top passages.

For every (perturbation, claim, presentation) of a reranking ``scores`` file whose claim has a
gold verdict (docs/methods/verdict-flip.md):

1. the top ``k`` passages (k = 5 by default) of that presentation's ranking, highest score
   first, ties to the passage shown earlier (:func:`presdep.scoring.reader.top_k_contexts`,
   the QA reader's rule, so BSC rows read their ensembles there too);
2. tagged ``[i]`` and cut to the dataset's ``max_doc_chars``, they go to the reader under the
   pinned :data:`VERDICT_PROMPT` (greedy, ``max_new_tokens`` = 8, thinking off), through the same
   :class:`presdep.scoring.frozen_reader.FrozenReader` as the QA reader (batches, resume, cache);
3. the reply is normalised by :func:`normalize_verdict` to SUPPORTED, REFUTED or NEI, or
   INVALID (no alias, or aliases of more than one class), which stays its own class.

Claims whose gold verdict is DISPUTED are not read and are counted, as are claims without a
gold label. The evidence of a claim is its judged relevant passages (qrels relevance > 0);
each row records how many of them the reader saw and the 0-based slot of the first.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.data.verdict_labels import DISPUTED, VERDICT_CLASSES, read_verdict_labels
from presdep.scoring.frozen_reader import FrozenReader, ReaderPrompt, finish_job_reader, job_reader
from presdep.scoring.reader import top_k_contexts

log = logging.getLogger(__name__)

VERDICT_PROMPT = ReaderPrompt(
    "verdict_reader_v1",
    "Evidence:\n{paragraphs}\n\n"
    "Claim: {question}\n\n"
    "Using only the evidence above, is the claim supported, refuted, or is there not enough information? "
    "Answer with exactly one of: SUPPORTED, REFUTED, NOT ENOUGH INFO.",
    system=("You are a precise claim-verification assistant. You judge a claim only from the evidence "
            "passages you are given, never from outside knowledge, and you answer with exactly one label: "
            "SUPPORTED, REFUTED or NOT ENOUGH INFO."),
)
INVALID = "INVALID"
VERDICT_KEYS = ("k", "max_new_tokens", "batch_size", "device", "dtype")

# The paper's aliases of each class (docs/methods/verdict-flip.md), matched on the normalised reply. A bare
# INSUFFICIENT, INSUFFICIENT DATA or CONTRADICTS is none of them: such a reply is INVALID.
VERDICT_ALIASES = {
    "SUPPORTED": ("SUPPORT", "SUPPORTED", "SUPPORTS", "ENTAILMENT", "ENTAILS"),
    "REFUTED": ("CONTRADICT", "CONTRADICTED", "CONTRADICTION", "REFUTE", "REFUTED", "REFUTES"),
    "NEI": ("NEI", "NOT ENOUGH INFO", "NOT ENOUGH INFORMATION", "INSUFFICIENT EVIDENCE", "INSUFFICIENT INFORMATION"),
}
_CLASS_OF_ALIAS = {alias: label for label, aliases in VERDICT_ALIASES.items() for alias in aliases}
# Whole words of the normalised text: bounded by its ends or a space (it holds only A-Z and spaces).
_ALIAS_PATTERNS = {alias: re.compile(rf"(?<!\S){re.escape(alias)}(?!\S)") for alias in _CLASS_OF_ALIAS}


def normalized_reply(text: str) -> str:
    """Runs of ``_`` and ``-`` made a space, upper-cased, every other non-letter made a space,
    spaces collapsed ("not_enough-info." reads NOT ENOUGH INFO)."""
    value = re.sub(r"[^A-Z]", " ", re.sub(r"[_-]+", " ", str(text)).upper())
    return " ".join(value.split())


def normalize_verdict(text: str) -> str:
    """SUPPORTED, REFUTED or NEI: the class of the whole normalised reply when it is an alias,
    else of the aliases found in it as whole words when they name exactly one class; else INVALID."""
    value = normalized_reply(text)
    if value in _CLASS_OF_ALIAS:
        return _CLASS_OF_ALIAS[value]
    found = {_CLASS_OF_ALIAS[alias] for alias, pattern in _ALIAS_PATTERNS.items() if pattern.search(value)}
    return found.pop() if len(found) == 1 else INVALID


def read_verdicts(scores: pl.DataFrame, candidates: pl.DataFrame, qrels: pl.DataFrame, labels: pl.DataFrame,
                  reader: FrozenReader, *, k: int, bsc_k: int = 1, ensembles: int = 4, progress: bool = False,
                  done_dir: str | os.PathLike | None = None) -> tuple[pl.DataFrame, dict]:
    """The ``verdicts`` table and run facts (claims read, DISPUTED and unlabelled claims left out)."""
    gold = dict(labels.select("query_id", "gold").iter_rows())
    scored = sorted(set(scores["query_id"].unique().to_list()))
    disputed = [q for q in scored if gold.get(q) == DISPUTED]
    unlabelled = [q for q in scored if q not in gold]
    keep = [q for q in scored if gold.get(q) in VERDICT_CLASSES]
    if unlabelled:
        log.warning("%d scored claims have no gold verdict and are not read (e.g. %s)", len(unlabelled), unlabelled[:3])
    if not keep:
        raise InvalidInput(f"no scored claim has a gold verdict in {VERDICT_CLASSES} ({len(disputed)} DISPUTED, "
                           f"{len(unlabelled)} unlabelled of {len(scored)}): are the labels those of this dataset?")
    contexts = top_k_contexts(scores.filter(pl.col("query_id").is_in(keep)), k, bsc_k=bsc_k, ensembles=ensembles)
    texts = {(q, d): x for q, d, x in candidates.select("query_id", "doc_id", "doc").iter_rows()}
    claims = dict(candidates.select("query_id", "query").unique("query_id").iter_rows())
    evidence: dict[str, set[str]] = {}
    for q, d in qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id").iter_rows():
        evidence.setdefault(q, set()).add(d)
    items = []
    for c in contexts:
        missing = [d for d in c.doc_ids if (c.query_id, d) not in texts]
        if missing:
            raise InvalidInput(f"scores name doc(s) {missing[:3]} of claim {c.query_id!r} that are not in the candidates")
        items.append((claims[c.query_id], [texts[(c.query_id, d)] for d in c.doc_ids]))
    raw = reader.generate_for(items, progress=progress, done_dir=done_dir)
    slots = [[i for i, d in enumerate(c.doc_ids) if d in evidence.get(c.query_id, ())] for c in contexts]
    df = pl.DataFrame({
        "query_id": [c.query_id for c in contexts],
        "perturbation": [c.perturbation for c in contexts],
        "presentation": pl.Series([c.presentation for c in contexts], dtype=pl.Int32),
        "verdict": [normalize_verdict(t) for t in raw],
        "raw_answer": raw,
        "gold": [gold[c.query_id] for c in contexts],
        "evidence_in_topk": pl.Series([len(s) for s in slots], dtype=pl.Int32),
        "evidence_slot": pl.Series([s[0] if s else None for s in slots], dtype=pl.Int32),
    })
    facts = {"k": k, "bsc_k": bsc_k, "claims_scored": len(scored), "claims_read": len(keep),
             "excluded_disputed": len(disputed), "unlabelled": len(unlabelled), "presentations": len(contexts),
             "unique_prompts": len(set(map(repr, items)))}
    return df, facts


def read_verdicts_files(*, scores_path: str | os.PathLike, candidates_path: str | os.PathLike,
                        qrels_path: str | os.PathLike, labels_path: str | os.PathLike, labels_format: str,
                        out_path: str | os.PathLike, reader_config: Mapping[str, Any], model_dir: str | os.PathLike,
                        max_doc_chars: int | None, threads: int | None = None,
                        answer_cache: str | os.PathLike | None = None,
                        model_spec: Mapping[str, Any] | None = None) -> pl.DataFrame:
    """The ``read_verdicts`` job: judge every presentation's top k, write the ``verdicts`` contract
    (the model is loaded only if a prompt is not in the answer cache)."""
    cfg = dict(reader_config)
    missing = [key for key in VERDICT_KEYS if key not in cfg]
    if missing:
        raise InvalidInput(f"verdict reader config lacks {missing}; got {sorted(cfg)}")
    source = read_metadata(scores_path)
    if "bsc_k" not in source or "bsc_ensembles" not in source:
        raise InvalidInput(f"{scores_path}: scores metadata lacks bsc_k/bsc_ensembles; score the run again")
    reader, done_dir = job_reader(cfg, model_dir, max_doc_chars, VERDICT_PROMPT, out_path=out_path,
                                  answer_cache=answer_cache, model_spec=model_spec, threads=threads)
    verdicts, facts = read_verdicts(
        read_table(scores_path, "scores"), read_table(candidates_path, "candidates"), read_table(qrels_path, "qrels"),
        read_verdict_labels(labels_path, labels_format), reader, k=int(cfg["k"]),
        bsc_k=int(source["bsc_k"]), ensembles=int(source["bsc_ensembles"]), progress=True, done_dir=done_dir)
    facts.update(finish_job_reader(reader))
    log.info("judged %d presentations of %d claims (%d DISPUTED and %d unlabelled left out; %d generated, model %s)",
             facts["presentations"], facts["claims_read"], facts["excluded_disputed"], facts["unlabelled"],
             reader.generated, "loaded" if reader.model_loaded else "not loaded")
    write_table(verdicts.sort("perturbation", "query_id", "presentation"), out_path, "verdicts",
                {"reader": cfg, "max_doc_chars": max_doc_chars, "scores": str(scores_path),
                 "labels": str(labels_path), "labels_format": labels_format},
                k=int(cfg["k"]), reader=reader.describe(), facts=facts, scores_params=source.get("params"),
                template_sha256=source.get("template_sha256"))
    if done_dir is not None:
        shutil.rmtree(done_dir)
    return verdicts


__all__ = ["INVALID", "VERDICT_ALIASES", "VERDICT_PROMPT", "normalize_verdict", "normalized_reply", "read_verdicts",
           "read_verdicts_files"]
