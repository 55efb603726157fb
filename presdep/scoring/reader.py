"""The frozen QA reader: answers each question from each presentation's top-k paragraphs.

For every (perturbation, query, presentation) of a QA ``scores`` file (the
presentations decision metrics compare, :func:`presdep.contracts.views.decision_presentations`:
random shuffles 0..M-1, or BSC's ensembles; within_chunk and middle_injection as
stored; the first-stage pass is not read):

1. the reader gets the top ``k`` paragraphs of that presentation's ranking (k = 5
   by default, 3 allowed), ordered by (-score, position): highest score first,
   ties to the paragraph shown earlier (docs/methods/answer-flip.md). No threshold
   is involved;
2. each paragraph is tagged ``[i]`` and cut to ``max_doc_chars`` the way the scorer
   cuts documents;
3. a chat model answers greedily (no sampling, one beam, ``max_new_tokens``
   short), in left-padded batches. Identical prompts are generated once and
   share the answer, so two presentations with the same top-k in the same order
   cannot flip through batch composition;
4. the stored ``answer`` follows the reader's ``answer_extraction`` rule, recorded in
   the answers file: ``paper`` (the default, the paper's rule, :func:`paper_answer`) =
   the first line of the generated text with a leading ``Answer:`` stripped;
   ``lenient`` (for small readers, not the paper's, :func:`clean_answer`) = the first
   line with content after any answer label ("Answer:", "The answer is", markdown
   around it; a label alone on its line hands over to the next line), surrounding
   quotes/asterisks and a trailing full stop removed. ``raw_answer`` keeps the
   generated text as it came. SQuAD normalisation is left to the metrics;
5. finished batches are flushed to ``<out>.partial/``, so a killed job resumes
   and writes the file an uninterrupted run would have written.

The reader prompt is part of the method: :data:`READER_PROMPT` and its sha256 go
into the output's metadata, with k.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import BATCH_NOISE, decision_presentations
from presdep.scoring.frozen_reader import QA_PROMPT, FrozenReader, finish_job_reader, job_reader

log = logging.getLogger(__name__)

READER_PROMPT_NAME = QA_PROMPT.name
READER_PROMPT = QA_PROMPT.user
READER_PROMPT_SHA256 = QA_PROMPT.sha256
# Settings the job needs (the validated config's reader section, device/dtype from the model entry).
READER_KEYS = ("k", "max_new_tokens", "batch_size", "device", "dtype", "answer_extraction")


READER_K = (3, 5)


@dataclass(frozen=True)
class Context:
    """What the reader sees for one presentation."""

    perturbation: str
    query_id: str
    presentation: int
    doc_ids: tuple[str, ...]  # the top k, highest score first (ties: shown earlier first)


def top_k_contexts(scores: pl.DataFrame, k: int, *, bsc_k: int = 1, ensembles: int = 4) -> list[Context]:
    """One :class:`Context` per perturbation x query x presentation (first-stage pass excluded).

    ``bsc_k``/``ensembles`` say how random shuffles become presentations (BSC
    ensembles when ``bsc_k > 1``); other perturbations are read as stored.
    """
    if k not in READER_K:
        raise InvalidInput(f"reader k must be one of {READER_K}, got {k!r}")
    perts = sorted(set(scores["perturbation"].unique().to_list()) - {FIRST_STAGE, BATCH_NOISE})
    if not perts:
        raise InvalidInput("scores have no presentations to read (only the first-stage pass)")
    out: list[Context] = []
    for pert in perts:
        is_shuffle = pert == "random_shuffle"
        view = decision_presentations(scores, bsc_k=bsc_k if is_shuffle else 1, ensembles=ensembles,
                                      perturbation=pert)
        ranked = view.sort("query_id", "presentation", pl.col("score"), "position",
                           descending=[False, False, True, False])
        top = ranked.group_by("query_id", "presentation", maintain_order=True).agg(pl.col("doc_id").head(k))
        out += [Context(pert, q, int(m), tuple(d)) for q, m, d in top.iter_rows()]
    return out


def render_prompt(question: str, paragraphs: Sequence[str], max_doc_chars: int | None = None) -> str:
    """The user message of the QA reader."""
    return QA_PROMPT.render(question, paragraphs, max_doc_chars)


# "Answer:", "Final answer -", "The answer is", "The answer is:" (a label, not the answer).
_LABEL = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer(?:\s+is\b\s*[:\-]?|\s*[:\-])\s*", re.IGNORECASE)


ANSWER_EXTRACTIONS = ("paper", "lenient")


def paper_answer(text: str) -> str:
    """The paper's answer: the reply's first line, a leading ``Answer:`` stripped."""
    lines = text.strip().splitlines()
    line = lines[0].strip() if lines else ""
    return line[len("Answer:"):].strip() if line.startswith("Answer:") else line


def extract_answer(text: str, rule: str = "paper") -> str:
    """The stored answer of a generated text under a named rule (``ANSWER_EXTRACTIONS``)."""
    if rule == "paper":
        return paper_answer(text)
    if rule == "lenient":
        return clean_answer(text)
    raise InvalidInput(f"unknown answer_extraction {rule!r}; expected one of {ANSWER_EXTRACTIONS}")


def clean_answer(text: str) -> str:
    """The first line with content after an answer label ("Answer:", "The answer is"),
    without surrounding quotes/asterisks or a trailing full stop.

    A label alone on its line ("The answer is:\n2016") hands over to the next line.
    """
    line = ""
    for raw in text.splitlines():
        line = _LABEL.sub("", raw.strip().lstrip("*#> ")).strip()  # markdown before a label
        if line:
            break
    while True:  # quotes, asterisks and trailing full stops, in any nesting
        cut = line.strip().strip("\"'`*").strip().rstrip(".")
        if cut == line:
            return line
        line = cut


def read_answers(
    scores: pl.DataFrame,
    candidates: pl.DataFrame,
    reader: FrozenReader,
    *,
    k: int,
    bsc_k: int = 1,
    ensembles: int = 4,
    progress: bool = False,
    done_dir: str | os.PathLike | None = None,
    extraction: str = "paper",
) -> tuple[pl.DataFrame, dict]:
    """The ``answers`` table (query_id, perturbation, presentation, answer, raw_answer) and run facts."""
    if extraction not in ANSWER_EXTRACTIONS:
        raise InvalidInput(f"unknown answer_extraction {extraction!r}; expected one of {ANSWER_EXTRACTIONS}")
    contexts = top_k_contexts(scores, k, bsc_k=bsc_k, ensembles=ensembles)
    texts = {(q, d): x for q, d, x in candidates.select("query_id", "doc_id", "doc").iter_rows()}
    questions = dict(candidates.select("query_id", "query").unique("query_id").iter_rows())
    items = []
    for c in contexts:
        if c.query_id not in questions:
            raise InvalidInput(f"scores name query {c.query_id!r}, which is not in the candidates")
        missing = [d for d in c.doc_ids if (c.query_id, d) not in texts]
        if missing:
            raise InvalidInput(f"scores name doc(s) {missing[:3]} of query {c.query_id!r} that are not in the candidates")
        items.append((questions[c.query_id], [texts[(c.query_id, d)] for d in c.doc_ids]))
    raw = reader.generate_for(items, progress=progress, done_dir=done_dir)
    df = pl.DataFrame(
        {
            "query_id": [c.query_id for c in contexts],
            "perturbation": [c.perturbation for c in contexts],
            "presentation": pl.Series([c.presentation for c in contexts], dtype=pl.Int32),
            "answer": [extract_answer(t, extraction) for t in raw],
            "raw_answer": raw,
        }
    )
    facts = {"k": k, "bsc_k": bsc_k, "presentations": len(contexts), "unique_prompts": len(set(map(repr, items))),
             "answer_extraction": extraction}
    return df, facts


def read_answers_files(
    *,
    scores_path: str | os.PathLike,
    candidates_path: str | os.PathLike,
    out_path: str | os.PathLike,
    reader_config: Mapping[str, Any],
    model_dir: str | os.PathLike,
    max_doc_chars: int | None = 1200,
    threads: int | None = None,
    answer_cache: str | os.PathLike | None = None,
    model_spec: Mapping[str, Any] | None = None,
) -> pl.DataFrame:
    """The ``read_answers`` job: answer (loading the reader model only if a prompt is not in
    the answer cache), write the ``answers`` contract.

    ``answer_cache``: the answer cache's folder; ``model_spec`` (the reader's ``models``
    entry) names the model there by its pin where it has one. Without a cache, finished
    batches go to ``<out>.partial/`` so a killed job resumes.
    """
    cfg = dict(reader_config)
    missing = [k for k in READER_KEYS if k not in cfg]
    if missing:
        raise InvalidInput(f"reader config lacks {missing} (k = paragraphs per presentation, one of {READER_K}); "
                         f"got {sorted(cfg)}")
    source = read_metadata(scores_path)
    # BSC's presentations are ensembles of K shuffles: the scores file says which.
    if "bsc_k" not in source or "bsc_ensembles" not in source:
        raise InvalidInput(f"{scores_path}: scores metadata lacks bsc_k/bsc_ensembles (written by an older presdep?); "
                         "score the run again")
    bsc_k, ensembles = int(source["bsc_k"]), int(source["bsc_ensembles"])
    reader, done_dir = job_reader(cfg, model_dir, max_doc_chars, QA_PROMPT, out_path=out_path,
                                  answer_cache=answer_cache, model_spec=model_spec, threads=threads)
    answers, facts = read_answers(
        read_table(scores_path, "scores"), read_table(candidates_path, "candidates"), reader,
        k=int(cfg["k"]), bsc_k=bsc_k, ensembles=ensembles, progress=True, done_dir=done_dir,
        extraction=cfg["answer_extraction"],
    )
    facts.update(finish_job_reader(reader))
    log.info("answered %d presentations (%d distinct prompts, %d generated, model %s) from the top %d paragraphs",
             facts["presentations"], facts["unique_prompts"], reader.generated,
             "loaded" if reader.model_loaded else "not loaded", facts["k"])
    write_table(
        answers.sort("perturbation", "query_id", "presentation"), out_path, "answers",
        {"reader": dict(cfg), "max_doc_chars": max_doc_chars, "scores": str(scores_path)},
        k=int(cfg["k"]), reader=reader.describe(), facts=facts, answer_extraction=facts["answer_extraction"],
        scores_params=source.get("params"), template_sha256=source.get("template_sha256"),
    )
    if done_dir is not None:
        shutil.rmtree(done_dir)
    return answers


__all__ = [
    "ANSWER_EXTRACTIONS", "READER_K", "READER_PROMPT", "READER_PROMPT_SHA256", "Context", "FrozenReader",
    "clean_answer", "extract_answer", "paper_answer", "read_answers", "read_answers_files", "render_prompt",
    "top_k_contexts",
]
