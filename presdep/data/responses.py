"""Response ranking sets: RM-Bench JSON and a generic JSONL with preference ranks.

Both map to the candidates contract (query = the prompt, doc = one response) and
to qrels, so the same readout and metrics serve response ranking as reranking.

``rm_bench_json``: RM-Bench's data files (``chat_filtered.json``, ``safety-*.json``,
...), a list of ``{"id", "prompt", "chosen": [3 texts], "rejected": [3 texts]}``.
The three chosen (and three rejected) responses differ in style (concise,
detailed, markdown), not in preference; RM-Bench only asserts that every chosen
response beats every rejected one. Qrels are therefore binary: chosen = 1,
rejected = 0. Binary gains encode exactly that claim (nDCG@1 = 1 iff the top
response is a chosen one) and invent no order among the chosen.

``responses_jsonl``: one prompt per line, ``{"id"?, "prompt", "responses": [...],
"ranks": [...], "response_ids"?}``. ``ranks[i]`` is the preference rank of
``responses[i]``: 1 = most preferred, equal ranks tie, gaps are allowed. Ids default
to the line number and ``"0", "1", ...``. Relevance = the number of distinct rank
levels strictly below the response's level (the least preferred level gets 0): a
chosen/rejected split gives 1/0 exactly as for RM-Bench, and a full order of n
responses gives n-1 ... 0.

**The first-stage order is label-blind, for both formats.** Files list preferred
responses first (RM-Bench: chosen before rejected; a ranked JSONL is often written
best-first). Taking that as the first stage would hand the label to anything that
follows the given order: the identity scorer would get nDCG@1 = 1, and the canonical
and within-chunk presentations would put every preferred response in the first
prompt. So the first-stage order is ascending :func:`blind_key` = sha256 of
``"<prompt id>\\0<response key>"`` (:func:`label_blind_order`), the one rule of every
response set (the fetched sources use it too): the response key is the response id
for ``responses_jsonl`` (given or positional) and ``"<chosen|rejected>\\0<index>"``
for RM-Bench, whose response ids are that digest's first 12 hex digits
(:func:`label_blind_id`). The order is fixed and reproducible, does not depend on the
labels, and, with ids from the file, not on the file's order of responses either.

A response text given twice in one prompt is kept, counted and warned about once per
file (:mod:`presdep.data.duplicates`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from presdep.contracts.errors import InputFormatError, InvalidInput
from presdep.data.duplicates import DuplicateTexts
from presdep.data.text_input import json_list, json_records

log = logging.getLogger(__name__)

FORMATS = ("rm_bench_json", "responses_jsonl")
RM_BENCH_CHOSEN = 1
RM_BENCH_REJECTED = 0

_CAND_SCHEMA = {
    "query_id": pl.String, "query": pl.String, "doc_id": pl.String, "doc": pl.String,
    "first_stage_rank": pl.Int32, "first_stage_score": pl.Float64,
}
_QRELS_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}


class ResponseSet(NamedTuple):
    """A response-ranking collection: candidates and qrels (no gold answers)."""

    candidates: pl.DataFrame
    qrels: pl.DataFrame
    gold: None = None


class _Builder:
    def __init__(self, path: str | Path):
        self.path = path
        self.cands: dict[str, list] = {k: [] for k in _CAND_SCHEMA}
        self.qrels: dict[str, list] = {k: [] for k in _QRELS_SCHEMA}
        self.seen: set[str] = set()
        self.duplicates = DuplicateTexts("response")

    def add(self, where: str, qid: str, prompt: str, items: list[tuple[str, str, int]]) -> None:
        """``items``: (doc_id, text, relevance) in first-stage order."""
        if qid in self.seen:
            raise InputFormatError(self.path, where, f"prompt id {qid!r} appears twice")
        self.seen.add(qid)
        if not prompt.strip():
            raise InputFormatError(self.path, where, f"prompt {qid!r} is empty")
        ids = [d for d, _, _ in items]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InputFormatError(self.path, where, f"prompt {qid!r} has response id {dup!r} twice")
        self.duplicates.add(qid, [text for _, text, _ in items])
        n = len(items)
        for rank, (did, text, rel) in enumerate(items, start=1):
            self.cands["query_id"].append(qid)
            self.cands["query"].append(prompt.strip())
            self.cands["doc_id"].append(did)
            self.cands["doc"].append(text)
            self.cands["first_stage_rank"].append(rank)
            self.cands["first_stage_score"].append(float(n - rank + 1))
            self.qrels["query_id"].append(qid)
            self.qrels["doc_id"].append(did)
            self.qrels["relevance"].append(int(rel))

    def finish(self) -> ResponseSet:
        if not self.seen:
            raise InputFormatError(self.path, "whole file", "no prompts found")
        self.duplicates.warn(self.path)
        return ResponseSet(pl.DataFrame(self.cands, schema=_CAND_SCHEMA), pl.DataFrame(self.qrels, schema=_QRELS_SCHEMA))


def _texts(path, where: str, value: Any, name: str, qid: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise InputFormatError(path, where, f"'{name}' must be a non-empty list of strings")
    for k, text in enumerate(value):  # positions as the file gives them, before the label-blind order
        if not text.strip():
            what = "response" if name == "responses" else f"'{name}' response"
            raise InputFormatError(path, where, f"prompt {qid!r}: {what} {k} is empty")
    return value


def blind_key(prompt_id: str, response_key: str) -> str:
    """sha256 (hex) of ``"<prompt id>\\0<response key>"``: what every response set's first stage sorts by."""
    return hashlib.sha256(f"{prompt_id}\0{response_key}".encode("utf-8")).hexdigest()


def label_blind_order(prompt_id: str, keys: Sequence[str]) -> list[int]:
    """Positions of a prompt's responses (given by their keys) in first-stage order: ascending
    :func:`blind_key`, so neither the labels nor the file's order decide it."""
    return sorted(range(len(keys)), key=lambda i: blind_key(prompt_id, keys[i]))


def label_blind_id(prompt_id: str, label: str, index: int) -> str:
    """RM-Bench response id: reveals neither the label nor the position in the file."""
    return blind_key(prompt_id, f"{label}\0{index}")[:12]


def read_rm_bench(path: str | Path) -> ResponseSet:
    """RM-Bench JSON -> candidates (label-blind order) and binary qrels (chosen 1, rejected 0)."""
    entries = json_list(path, "{id, prompt, chosen, rejected} objects")
    b = _Builder(path)
    clashes = []
    for i, row in enumerate(entries):
        where = f"entry {i}"
        if not isinstance(row, dict):
            raise InputFormatError(path, where, "expected an object with 'id', 'prompt', 'chosen', 'rejected'")
        missing = [f for f in ("id", "prompt", "chosen", "rejected") if f not in row]
        if missing:
            raise InputFormatError(path, where, f"missing field(s) {missing}; expected id, prompt, chosen, rejected")
        qid = str(row["id"])
        where = f"entry {i} (id {qid})"
        if not isinstance(row["prompt"], str):
            raise InputFormatError(path, where, "'prompt' must be a string")
        chosen = _texts(path, where, row["chosen"], "chosen", qid)
        rejected = _texts(path, where, row["rejected"], "rejected", qid)
        if set(chosen) & set(rejected):
            clashes.append(qid)
        labelled = [("chosen", k, t, RM_BENCH_CHOSEN) for k, t in enumerate(chosen)]
        labelled += [("rejected", k, t, RM_BENCH_REJECTED) for k, t in enumerate(rejected)]
        order = label_blind_order(qid, [f"{label}\0{k}" for label, k, _, _ in labelled])
        b.add(where, qid, row["prompt"],
              [(label_blind_id(qid, label, k), t, rel) for label, k, t, rel in (labelled[i] for i in order)])
    if clashes:
        log.warning(
            "%s: %d prompt(s) list the same text as chosen and as rejected; no scorer can separate those (e.g. id %s)",
            path, len(clashes), clashes[0],
        )
    return b.finish()


def relevance_from_ranks(ranks: list[int]) -> list[int]:
    """Distinct rank levels strictly below each rank (rank 1 = most preferred)."""
    levels = sorted(set(ranks))
    return [len(levels) - 1 - levels.index(r) for r in ranks]


def read_response_jsonl(path: str | Path) -> ResponseSet:
    """Generic ``{id?, prompt, responses, ranks, response_ids?}`` JSONL -> candidates and graded qrels."""
    b = _Builder(path)
    for number, row in json_records(path):
        where = f"line {number}"
        missing = [f for f in ("prompt", "responses", "ranks") if f not in row]
        if missing:
            raise InputFormatError(path, where, f"missing field(s) {missing}; expected prompt, responses, ranks")
        if not isinstance(row["prompt"], str):
            raise InputFormatError(path, where, "'prompt' must be a string")
        qid = str(row.get("id", number))
        responses = _texts(path, where, row["responses"], "responses", qid)
        ranks = row["ranks"]
        if (not isinstance(ranks, list) or len(ranks) != len(responses)
                or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in ranks)):
            raise InputFormatError(
                path, where, f"'ranks' must be {len(responses)} integers >= 1 (one per response, 1 = most preferred)"
            )
        if len(set(ranks)) < 2:
            raise InputFormatError(path, where, "all responses share one rank: the line states no preference")
        ids = row.get("response_ids", [str(k) for k in range(len(responses))])
        if not isinstance(ids, list) or len(ids) != len(responses):
            raise InputFormatError(path, where, "'response_ids' must list one id per response")
        ids = [str(d) for d in ids]
        rels = relevance_from_ranks(ranks)
        b.add(where, qid, row["prompt"], [(ids[i], responses[i], rels[i]) for i in label_blind_order(qid, ids)])
    return b.finish()


def read_responses(path: str | Path, fmt: str) -> ResponseSet:
    """Dispatch on the config's candidates format name."""
    if fmt == "rm_bench_json":
        return read_rm_bench(path)
    if fmt == "responses_jsonl":
        return read_response_jsonl(path)
    raise InvalidInput(f"unknown response-set format {fmt!r}; expected one of {FORMATS}")


__all__ = [
    "ResponseSet", "FORMATS", "read_responses", "read_rm_bench", "read_response_jsonl",
    "relevance_from_ranks", "label_blind_id", "label_blind_order", "blind_key",
]
