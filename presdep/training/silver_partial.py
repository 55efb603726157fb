"""The batch plan of a silver-label job and its resume folder.

The teacher reads prompts in batches of similar length (:func:`plan_batches`): the
longest first, cut by a character budget and a prompt count. Each finished batch is
flushed to ``<out>.partial/b-<index>.arrow`` (Arrow IPC, written atomically; its layout
rows and scores, keyed by the prompt's index in the job's prompt list), with the
batch's hosted usage beside it in ``b-<index>.stats.json``. The folder carries a
fingerprint of everything the reads depend on (:mod:`presdep.runtime.resume`), so a
killed job repeats at most the batch in flight and a folder left by other inputs or
settings is discarded. Batch files are keyed by index, so the plan must be a pure
function of the prompts and the two limits.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import atomic_write, write_text_atomic

log = logging.getLogger(__name__)

# Defaults: at most 64 prompts (the batch of the former fixed plan) and 2**18 prompt tokens
# (an open-weight teacher, whose tokenizer counts them) or about 2**20 characters (a hosted
# teacher, ~250k tokens) per batch, so a kill repeats minutes of reading at most.
BATCH_PROMPTS = 64
BATCH_TOKENS = 1 << 18
BATCH_CHARS = 1 << 20
LENGTH_RULE = "characters of the query and the prepared documents"
TOKEN_RULE = "tokens of the teacher's prompt (its tokenizer and template)"

ROW_SCHEMA = {"prompt": pl.Int64, "query_id": pl.String, "doc_id": pl.String, "presentation": pl.Int32,
              "score": pl.Float64}


def prompt_chars(query: str, docs: Sequence[str]) -> int:
    """The length proxy of a prompt: the same for every scorer, needs no tokenizer."""
    return len(query) + sum(len(d) for d in docs)


def plan_batches(lengths: Sequence[int], *, max_prompts: int = BATCH_PROMPTS,
                 max_chars: int = BATCH_CHARS) -> list[list[int]]:
    """Prompt indices in batches: longest first (ties by index), a batch closed before it
    would pass ``max_prompts`` prompts or ``max_chars`` of length (characters, or tokens when
    ``lengths`` count tokens); a prompt longer than the
    budget is a batch of its own. Within a batch the indices ascend (a scorer sorts its own
    call by length; this keeps a call's prompts in the job's order). Deterministic: the
    same lengths give the same batches."""
    if int(max_prompts) < 1 or int(max_chars) < 1:
        raise InvalidInput(f"silver batch limits must be >= 1, got max_prompts={max_prompts!r}, "
                           f"max_chars={max_chars!r}")
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    batches: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i in order:
        if cur and (len(cur) >= max_prompts or used + int(lengths[i]) > max_chars):
            batches.append(sorted(cur))
            cur, used = [], 0
        cur.append(i)
        used += int(lengths[i])
    if cur:
        batches.append(sorted(cur))
    return batches


def plan_settings(max_prompts: int, max_length: int, rule: str = LENGTH_RULE) -> dict:
    """What decides the batches (part of the resume fingerprint)."""
    return {"max_prompts": int(max_prompts), "max_length": int(max_length), "length": rule,
            "order": "longest first, ties by prompt index"}


def batch_path(partial: Path, k: int) -> Path:
    return partial / f"b-{k:07d}.arrow"


def stats_path(partial: Path, k: int) -> Path:
    return partial / f"b-{k:07d}.stats.json"


def done_batches(partial: Path, n_batches: int) -> set[int]:
    """Indices of the batches already flushed (one listing, not a stat per batch)."""
    names = set(os.listdir(partial))
    return {k for k in range(n_batches) if batch_path(partial, k).name in names}


def write_batch(partial: Path, k: int, rows: pl.DataFrame, stats: Mapping[str, Any] | None) -> None:
    """Flush batch ``k``: its stats first, then its rows, so a batch file implies its stats."""
    if stats is not None:
        write_text_atomic(stats_path(partial, k), json.dumps(stats, sort_keys=True, default=str))
    atomic_write(batch_path(partial, k), rows.write_ipc)


def read_batch(partial: Path, k: int, expect: pl.DataFrame) -> pl.DataFrame:
    """Batch ``k``'s rows; ``expect`` holds the keys the plan gives it (all but ``score``)."""
    path = batch_path(partial, k)
    hint = f"delete {partial} to start the job over"
    try:
        df = pl.read_ipc(path.read_bytes())  # bytes, not a mapping: the folder goes while the table lives on
    except Exception as exc:  # a file that is there was renamed complete into place: damage, not a kill
        raise RuntimeError(f"{path}: unreadable silver batch file ({exc}); {hint}") from exc
    if dict(df.schema) != ROW_SCHEMA:
        raise RuntimeError(f"{path}: silver batch file with columns {dict(df.schema)}, expected {ROW_SCHEMA}; {hint}")
    keys = [c for c in ROW_SCHEMA if c != "score"]
    if not df.select(keys).equals(expect.select(keys)):
        raise RuntimeError(f"{path}: its rows are not the {expect.height} (prompt, query, doc, shuffle) rows "
                           f"batch {k} of the plan holds, under a matching fingerprint; {hint}")
    return df


def read_stats(partial: Path, k: int) -> dict | None:
    path = stats_path(partial, k)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RuntimeError(f"{path}: unreadable usage of a silver batch ({exc}); delete {partial} "
                           f"to start the job over") from exc


def stats_delta(now: Mapping[str, Any], before: Mapping[str, Any]) -> dict:
    """The counts one batch added (``now - before``); ``first_error`` only when it appeared."""
    out: dict[str, Any] = {}
    for key, v in now.items():
        b = before.get(key)
        if isinstance(v, dict):
            d = {kk: vv - (b or {}).get(kk, 0) for kk, vv in v.items()}
            out[key] = {kk: vv for kk, vv in d.items() if vv}
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = v - (b or 0)
        else:
            out[key] = v if b is None else None
    return out


def merge_stats(parts: Sequence[Mapping[str, Any] | None]) -> dict:
    """Per-batch counts summed (in batch order: ``first_error`` is the earliest batch's)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, v in (part or {}).items():
            if isinstance(v, dict):
                acc = out.setdefault(key, {})
                for kk, vv in v.items():
                    acc[kk] = acc.get(kk, 0) + vv
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[key] = out.get(key, 0) + v
            elif out.get(key) is None:
                out[key] = v
    return out


def drop_failed_batches(partial: Path, n_batches: int) -> int:
    """Remove the flushed batches that hold failed prompts, so a re-run asks them again."""
    dropped = 0
    for k in sorted(done_batches(partial, n_batches)):
        stats = read_stats(partial, k)
        if stats and any(stats.get("failures", {}).values()):
            batch_path(partial, k).unlink()  # first: without its rows the batch is not done
            stats_path(partial, k).unlink(missing_ok=True)
            dropped += 1
    if dropped:
        log.info("%s: %d batch(es) with failed prompts removed; a re-run asks them again", partial, dropped)
    return dropped


__all__ = [
    "BATCH_PROMPTS", "BATCH_TOKENS", "BATCH_CHARS", "LENGTH_RULE", "TOKEN_RULE", "ROW_SCHEMA", "prompt_chars",
    "plan_batches", "plan_settings",
    "batch_path", "stats_path", "done_batches", "write_batch", "read_batch", "read_stats", "stats_delta",
    "merge_stats", "drop_failed_batches",
]
