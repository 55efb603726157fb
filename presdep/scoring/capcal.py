"""CapCal: content-free calibration of the per-slot grade distribution.

The prior q_s is the grade distribution at slot s when every document body is
empty (real probe queries, B slots, averaged over probes); it is computed once
per (model, template, B) and cached as its own Parquet artifact. Calibration of
a readout p at slot s (METHODS.md): alpha = beta * H(p) (nats),
p' = p - alpha * (q_s - 1/4), clipped at eps, renormalised; score = E[g] under p'.
The upstream generative variant uses alpha = min(5 H / log C, 2); not used here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from presdep import __version__
from presdep.schemas import METADATA_KEY, SchemaError, atomic_write

EPS = 1e-6
PRIOR_KIND = "capcal_prior"
_PRIOR_SCHEMA = pa.schema(
    [pa.field("slot", pa.int32(), False)] + [pa.field(f"q{g}", pa.float64(), False) for g in range(4)]
)


def entropy_nats(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(p), 0.0)
    return terms.sum(axis=-1)


def calibrate_probs(p: np.ndarray, q: np.ndarray, beta: float = 1.0, eps: float = EPS) -> np.ndarray:
    """p' = p - beta*H(p) * (q - 1/4), clipped at eps and renormalised (rows of 4)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    alpha = beta * entropy_nats(p)[..., None]
    out = np.clip(p - alpha * (q - 0.25), eps, None)
    return out / out.sum(axis=-1, keepdims=True)


def expected_grade(p: np.ndarray) -> np.ndarray:
    return np.asarray(p, dtype=np.float64) @ np.arange(4, dtype=np.float64)


def content_free_prompts(probe_queries: Sequence[str], b: int) -> list[tuple[str, list[str]]]:
    """The real probe queries with B empty documents each."""
    if b < 1 or not probe_queries:
        raise ValueError(f"content-free prior needs B >= 1 and at least one probe query (B={b}, {len(probe_queries)} queries)")
    return [(q, [""] * b) for q in probe_queries]


def content_free_prior(scorer: Any, probe_queries: Sequence[str], b: int) -> np.ndarray:
    """q[s, g]: mean grade distribution at slot s over the content-free probe prompts."""
    prompts = content_free_prompts(probe_queries, b)
    if hasattr(scorer, "slot_probs"):
        probs = np.stack([np.asarray(x, dtype=np.float64) for x in scorer.slot_probs(prompts)])
    else:
        readouts = scorer.score_prompts(prompts)
        if any(r.probs is None for ro in readouts for r in ro):
            raise ValueError(f"scorer {scorer.name} gives no grade probabilities; CapCal needs them")
        probs = np.asarray([[r.probs for r in ro] for ro in readouts], dtype=np.float64)
    return probs.mean(axis=0)


def write_prior(path: str | os.PathLike, q: np.ndarray, **meta: Any) -> Path:
    path = Path(path)
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] != 4 or not np.allclose(q.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError(f"a CapCal prior is [B, 4] with rows summing to 1; got shape {q.shape}")
    cols = {"slot": pa.array(np.arange(len(q), dtype=np.int32))}
    cols.update({f"q{g}": pa.array(q[:, g]) for g in range(4)})
    table = pa.table(cols, schema=_PRIOR_SCHEMA)
    md = {"presdep_version": __version__, "kind": PRIOR_KIND, "B": int(len(q)), **meta}
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(md, sort_keys=True, default=str)})
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def read_prior(path: str | os.PathLike) -> tuple[np.ndarray, dict]:
    path = Path(path)
    table = pq.read_table(path)
    md = json.loads((table.schema.metadata or {}).get(METADATA_KEY, b"{}"))
    if md.get("kind") != PRIOR_KIND:
        raise SchemaError(f"{path}: not a CapCal prior (metadata kind {md.get('kind')!r})")
    missing = [n for n in _PRIOR_SCHEMA.names if n not in table.column_names]
    if missing:
        raise SchemaError(f"{path}: CapCal prior lacks column(s) {missing}")
    df = pl.from_arrow(table.select(_PRIOR_SCHEMA.names)).sort("slot")
    if df["slot"].to_list() != list(range(df.height)):
        raise SchemaError(f"{path}: CapCal prior slots are not 0..B-1")
    return df.select("q0", "q1", "q2", "q3").to_numpy().astype(np.float64), md


_LOCAL_KEYS = ("path", "adapter", "source")


def _model_conflict(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict:
    """Keys naming the model (name, id, revision, package, file, sha256, ...) on which
    two descriptions disagree; machine-local paths and the source kind do not count."""
    if not a or not b:
        return {}
    return {k: (a[k], b[k]) for k in a.keys() & b.keys() if k not in _LOCAL_KEYS and a[k] != b[k]}


class CapCal:
    """Calibrates per-slot readouts with a cached content-free prior."""

    def __init__(self, prior: np.ndarray, beta: float = 1.0, eps: float = EPS, meta: dict | None = None):
        self.prior = np.asarray(prior, dtype=np.float64)
        self.beta = float(beta)
        self.eps = float(eps)
        self.meta = dict(meta or {})

    @classmethod
    def from_file(
        cls, path: str | os.PathLike, *, B: int, template_sha256: str | None = None,
        model: Mapping[str, Any] | None = None, beta: float = 1.0,
    ) -> "CapCal":
        q, md = read_prior(path)
        if md.get("B") != B or len(q) != B:
            raise ValueError(f"{path}: CapCal prior is for B={md.get('B')}, the protocol has B={B}")
        if template_sha256 is not None and md.get("template_sha256") != template_sha256:
            raise ValueError(f"{path}: CapCal prior was computed with template {md.get('template_sha256')}, "
                             f"the scorer uses {template_sha256}")
        conflict = _model_conflict(md.get("model"), model)
        if conflict:
            raise ValueError(f"{path}: CapCal prior was computed for another model (prior vs scorer: {conflict})")
        return cls(q, beta=beta, meta=md)

    def calibrate(self, raw: np.ndarray, slots: Sequence[int]) -> np.ndarray:
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size and slots.max() >= len(self.prior):
            raise ValueError(f"slot {int(slots.max())} beyond the prior's B={len(self.prior)}")
        return calibrate_probs(raw, self.prior[slots], self.beta, self.eps)

    def calibrated_scores(self, raw: np.ndarray, slots: Sequence[int]) -> np.ndarray:
        return expected_grade(self.calibrate(raw, slots))


def compute_capcal_prior(
    model: Mapping[str, Any] | str | os.PathLike,
    candidates_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    B: int,
    n_probes: int = 20,
    max_doc_chars: int = 1200,
    device: str = "auto",
    dtype: str = "auto",
    batch_size: int = 8,
    probe_dataset: str | None = None,
    threads: int | None = None,
) -> Path:
    """Load the model, read the first ``n_probes`` queries (by query id) from a
    candidates file, compute the content-free prior for B slots, write it."""
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    from presdep.models import describe_model, load_model
    from presdep.schemas import read_table
    from presdep.scoring.backends import TransformersScorer

    cand = read_table(candidates_path, "candidates")
    probes = cand.select("query_id", "query").unique("query_id").sort("query_id").head(n_probes)
    spec = model if isinstance(model, Mapping) else {"source": "local", "path": str(model)}
    m, tok = load_model(spec, device=device, dtype=dtype)
    scorer = TransformersScorer(m, tok, max_doc_chars=max_doc_chars, batch_size=batch_size,
                                model_desc=describe_model(spec))
    q = content_free_prior(scorer, probes["query"].to_list(), B)
    return write_prior(
        out_path, q, template_sha256=scorer.template_sha256, model=scorer.model_desc,
        probe_dataset=probe_dataset, probe_query_ids=probes["query_id"].to_list(), n_probes=probes.height,
    )
