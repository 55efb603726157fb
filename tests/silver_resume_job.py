"""A silver-label job for the resume tests (tests/unit/training/test_silver_resume.py).

Imported, :func:`job` runs ``silver_labels_files`` in-process; run as a script
(``python silver_resume_job.py CANDIDATES OUT KIND STOP_AT MARKER [MODEL_DIR]``) it
runs the same job, and with ``STOP_AT`` >= 0 it writes ``MARKER`` when the teacher
is asked for batch ``STOP_AT`` and then sleeps, so a test can kill -9 it with
batches 0..STOP_AT-1 flushed. It prints the teacher's calls and prompts as JSON.

Scorers: ``hash`` (scores derived from the prompt's text by SHA-256: deterministic,
no model) or ``tiny`` (the open-weight ``transformers`` readout of a tiny random model).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

from presdep.config.records import Protocol, Teacher
from presdep.contracts.schemas import write_table
from presdep.scoring import GradeReadout
from presdep.training.silver import make_open_weight_scorer, silver_labels_files

# Small batches, so a handful of queries makes many batch files.
SETTINGS = {"hash": {"T": 3, "B": 3, "seed": 5, "max_doc_chars": 80, "batch_prompts": 4, "batch_chars": 400},
            "tiny": {"T": 2, "B": 2, "seed": 5, "max_doc_chars": 40, "batch_prompts": 2, "batch_chars": 200,
                     "batch_tokens": 300}}
SIZES = {"hash": (6, 7), "tiny": (2, 4)}


def candidates(n_q: int, n_d: int) -> pl.DataFrame:
    """Docs of different lengths, so the length-sorted plan reorders the prompts."""
    rows = [{"query_id": f"q{q}", "query": f"where was entity {q} born", "doc_id": f"q{q}-d{d}",
             "doc": f"doc {d} of query {q}" + " filler" * ((3 * q + 5 * d) % 9),
             "first_stage_rank": d + 1, "first_stage_score": float(-d)} for q in range(n_q) for d in range(n_d)]
    return pl.DataFrame(rows).with_columns(pl.col("first_stage_rank").cast(pl.Int32))


def write_candidates(path: Path, kind: str) -> Path:
    write_table(candidates(*SIZES[kind]), path, "candidates")
    return path


def hash_score(query: str, doc: str, slot: int) -> float:
    h = hashlib.sha256(f"{query}\x1f{doc}\x1f{slot}".encode()).digest()
    return 3.0 * int.from_bytes(h[:8], "big") / 2**64


class HashScorer:
    """A teacher whose score is a hash of (query, doc, slot): the same prompt, the same scores."""

    name = "hash"
    template_sha256 = "hash-v1"

    def describe(self) -> dict:
        return {"scorer": self.name}

    def score_prompts(self, prompts):
        return [[GradeReadout(hash_score(q, d, s)) for s, d in enumerate(docs)] for q, docs in prompts]


class Interrupted(RuntimeError):
    pass


class Counting:
    """Wraps a scorer: counts its calls and prompts; in call ``stop_at`` writes ``marker`` and
    sleeps (``block``: a kill -9 comes) or raises :class:`Interrupted`."""

    def __init__(self, inner: Any, stop_at: int = -1, marker: Path | None = None, block: bool = True):
        self._inner, self.stop_at, self.marker, self.block = inner, stop_at, marker, block
        self.calls = self.prompts = 0
        self.batches: list[list[tuple[str, list[str]]]] = []

    def __getattr__(self, name):  # describe, template_sha256, name: the wrapped scorer's
        return getattr(self._inner, name)

    def score_prompts(self, prompts):
        if self.calls == self.stop_at:
            if self.marker is not None:
                self.marker.write_text(str(self.calls))
            if self.block:
                time.sleep(3600)
            raise Interrupted(f"stopped in call {self.calls}")
        self.calls += 1
        self.prompts += len(prompts)
        self.batches.append([(q, list(d)) for q, d in prompts])
        return self._inner.score_prompts(prompts)


def tiny_teacher(model_dir: Path, s: dict) -> Any:
    """The real open-weight readout on a tiny model (its batches are sized in its prompt tokens)."""
    return make_open_weight_scorer(model_dir, max_doc_chars=s["max_doc_chars"], device="cpu", dtype="float32",
                                   batch_prompts=2)


def job(cand: Path, out: Path, kind: str = "hash", *, scorer: Any = None, stop_at: int = -1,
        marker: Path | None = None, block: bool = True, model_dir: Path | None = None,
        **overrides: Any) -> tuple[pl.DataFrame | None, Counting]:
    """Run the job; (the silver table or None when interrupted, the counting scorer)."""
    s = {**SETTINGS[kind], **overrides}
    if scorer is None:
        scorer = HashScorer() if kind == "hash" else tiny_teacher(model_dir, s)
    counting = Counting(scorer, stop_at, marker, block)
    teacher = Teacher.checked(kind, {"kind": "open_weight", "model": kind, "T": s["T"], "device": "cpu"})
    protocol = Protocol.checked({"M": 1, "perturbations": [], "B": s["B"], "seed": s["seed"],
                                 "max_doc_chars": s["max_doc_chars"]})
    try:
        df = silver_labels_files(candidates_path=cand, out_path=out, teacher=teacher, dataset="ds",
                                 protocol=protocol, scorer=counting, model_dir=model_dir,
                                 batch_prompts=s["batch_prompts"],
                                 batch_chars=s["batch_chars"], **({"batch_tokens": s["batch_tokens"]}
                                                                  if "batch_tokens" in s else {}))
    except Interrupted:
        return None, counting
    return df, counting


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    cand, out, kind, stop_at, marker = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    model_dir = Path(sys.argv[6]) if len(sys.argv) > 6 else None
    _, c = job(cand, out, kind, stop_at=stop_at, marker=Path(marker) if marker != "-" else None, model_dir=model_dir)
    print(json.dumps({"calls": c.calls, "prompts": c.prompts}))
