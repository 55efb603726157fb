"""The batch plan of a silver-label job and its resume folder.

The teacher reads prompts in batches of similar length (:func:`plan_batches`): the
longest first, cut by a character budget and a prompt count. Each finished batch is
flushed to ``<out>.partial/b-<index>.arrow`` (Arrow IPC, written atomically; its layout
rows and scores, keyed by the prompt's index in the job's prompt list), after its record
``b-<index>.record.json``: the sha256 of the batch file's bytes and the batch's hosted
usage, a JSON artifact sealed by its own sha256 (:mod:`presdep.contracts.json_artifacts`).
On resume a batch whose record, bytes, layout or keys fail a check is discarded with a warning naming it and read again, so a damaged file never
crashes the job nor changes a label. The folder carries a fingerprint of everything the
reads depend on, the teacher's files by content included (:mod:`presdep.runtime.resume`),
so a killed job repeats at most the batch in flight and a folder left by other inputs,
settings or another teacher is discarded. Batch files are keyed by index, so the plan must be a pure
function of the prompts and the two limits.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from polars.exceptions import PanicException

from presdep.contracts.errors import InvalidInput, SchemaError
from presdep.contracts.json_artifacts import check_json_artifact, write_json_artifact
from presdep.contracts.schemas import write_bytes_atomic

log = logging.getLogger(__name__)

# Defaults: at most 64 prompts (the batch of the former fixed plan) and 2**18 prompt tokens
# (an open-weight teacher, whose tokenizer counts them) or about 2**20 characters (a hosted
# teacher, ~250k tokens) per batch, so a kill repeats minutes of reading at most.
BATCH_PROMPTS = 64
BATCH_TOKENS = 1 << 18
BATCH_CHARS = 1 << 20
# How batches are stored (part of the fingerprint: a folder of another layout is discarded whole).
BATCH_FILES = "b-<index>.arrow (Arrow IPC) after b-<index>.record.json (its sha256 and stats, a JSON artifact)"
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


def record_path(partial: Path, k: int) -> Path:
    return partial / f"b-{k:07d}.record.json"


def done_batches(partial: Path, n_batches: int) -> set[int]:
    """Indices of the batches already flushed (one listing, not a stat per batch)."""
    names = set(os.listdir(partial))
    return {k for k in range(n_batches) if batch_path(partial, k).name in names}


class DamagedBatch(Exception):
    """A flushed batch whose files do not hold what was written: its prompts are read again."""


def write_batch(partial: Path, k: int, rows: pl.DataFrame, stats: Mapping[str, Any] | None) -> pl.DataFrame:
    """Flush batch ``k``: its record (the rows file's sha256 and the batch's stats) first, then
    its rows, so a batch file always implies its record. Returns the rows as read back from the
    bytes written, as a resumed run reads them."""
    buf = io.BytesIO()
    rows.write_ipc(buf)
    data = buf.getvalue()
    write_json_artifact(record_path(partial, k), {"rows_sha256": hashlib.sha256(data).hexdigest(), "stats": stats},
                        default=str)
    write_bytes_atomic(batch_path(partial, k), data)
    return pl.read_ipc(data)


def resumed_batch(partial: Path, k: int, expect: pl.DataFrame) -> tuple[pl.DataFrame, dict | None] | None:
    """Batch ``k``'s rows and stats when its files are whole; ``expect`` holds the keys the plan
    gives it (all but ``score``). A batch that fails any check (its record, the sha256 of its
    bytes, its Arrow layout, its keys) is removed with a warning naming it and why, and None
    is returned: the caller reads it again. Never raises for what the files hold."""
    try:
        return _checked_batch(partial, k, expect)
    except DamagedBatch as exc:
        log.warning("%s: %s; discarded, its prompts are read again", batch_path(partial, k), exc)
        discard_batch(partial, k)
        return None


def discard_batch(partial: Path, k: int) -> None:
    batch_path(partial, k).unlink(missing_ok=True)  # first: without its rows the batch is not done
    record_path(partial, k).unlink(missing_ok=True)


def batch_record(partial: Path, k: int) -> dict:
    """Batch ``k``'s record (``rows_sha256``, ``stats``), checked against its own seal."""
    path = record_path(partial, k)
    try:
        record, sealed = check_json_artifact(path.read_bytes())
    except FileNotFoundError:
        raise DamagedBatch(f"its record {path.name} is missing") from None
    except OSError as exc:
        raise DamagedBatch(f"its record {path.name} is unreadable ({type(exc).__name__})") from None
    except SchemaError as exc:
        raise DamagedBatch(f"its record {path.name} {exc}") from None
    if not sealed or not isinstance(record.get("rows_sha256"), str):
        raise DamagedBatch(f"its record {path.name} lacks its own sha256 or the rows' sha256")
    return {key: record.get(key) for key in ("rows_sha256", "stats")}


def _checked_batch(partial: Path, k: int, expect: pl.DataFrame) -> tuple[pl.DataFrame, dict | None]:
    record = batch_record(partial, k)
    try:
        data = batch_path(partial, k).read_bytes()  # bytes, not a mapping: the folder goes while the table lives on
    except OSError as exc:
        raise DamagedBatch(f"unreadable ({type(exc).__name__}: {exc})") from None
    if hashlib.sha256(data).hexdigest() != record["rows_sha256"]:
        raise DamagedBatch("its bytes do not match the sha256 in its record")
    return parse_batch(data, k, expect), record["stats"]


def parse_batch(data: bytes, k: int, expect: pl.DataFrame) -> pl.DataFrame:
    """Batch ``k``'s rows from its file's bytes; :class:`DamagedBatch` for anything but the
    plan's rows in the row layout, a panic of the IPC reader included."""
    try:
        df = pl.read_ipc(data)
        if dict(df.schema) != ROW_SCHEMA:
            raise DamagedBatch(f"columns {dict(df.schema)}, expected {ROW_SCHEMA}")
        keys = [c for c in ROW_SCHEMA if c != "score"]
        if not df.select(keys).equals(expect.select(keys)):
            raise DamagedBatch(f"its rows are not the {expect.height} (prompt, query, doc, shuffle) rows batch {k} "
                               "of the plan holds")
    except DamagedBatch:
        raise
    except (Exception, PanicException) as exc:  # a panic of the IPC reader derives from BaseException
        raise DamagedBatch(f"unreadable as Arrow IPC ({type(exc).__name__}: {str(exc)[:200]})") from None
    return df


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
        try:
            failed = any(((batch_record(partial, k)["stats"] or {}).get("failures") or {}).values())
        except DamagedBatch:
            failed = True  # a re-run would discard it anyway
        if failed:
            discard_batch(partial, k)
            dropped += 1
    if dropped:
        log.info("%s: %d batch(es) with failed prompts removed; a re-run asks them again", partial, dropped)
    return dropped


__all__ = [
    "BATCH_PROMPTS", "BATCH_TOKENS", "BATCH_CHARS", "LENGTH_RULE", "TOKEN_RULE", "ROW_SCHEMA", "prompt_chars",
    "plan_batches", "plan_settings",
    "batch_path", "record_path", "done_batches", "DamagedBatch", "write_batch", "resumed_batch", "parse_batch", "discard_batch",
    "batch_record", "stats_delta", "merge_stats", "drop_failed_batches", "BATCH_FILES",
]
