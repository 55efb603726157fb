"""CapCal: content-free calibration of the per-slot grade distribution.

The prior q_s of a query is the grade distribution at slot s of a probe prompt: the
SAME query with every document body replaced by an empty string, at the same prompt
size (estimated per query, cached per query text: two queries with one text share it).
Calibration of a stored readout p at slot s (docs/methods/variants.md): alpha = beta * H(p)
(nats), p' = p - alpha * (q_s - 1/4), clipped at eps, renormalised; score = E[g] under p'.
The off-the-shelf run's stored probabilities are reused, so the probes are the only new
model work.
The upstream generative variant uses alpha = min(5 H / log C, 2); not used here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from presdep import __version__
from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_table, write_text_atomic
from presdep.runtime.hashing import sha256_file
from presdep.runtime.resume import partial_dir, resume_dir
from presdep.scoring.factory import make_scorer

EPS = 1e-8  # docs/methods/variants.md: clip at 1e-8, then renormalise


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


def content_free_prompts(query: str, sizes: Sequence[int]) -> list[tuple[str, list[str]]]:
    """The probe prompts of one query: the same query, every document body empty, one
    prompt per prompt size the query's scored prompts have (B, and the last prompt's
    size when B does not divide the candidate count)."""
    if not sizes or min(sizes) < 1:
        raise InvalidInput(f"content-free probes need prompt sizes >= 1, got {list(sizes)}")
    return [(query, [""] * int(b)) for b in sizes]


def probe_probs(scorer: Any, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[np.ndarray]:
    """P(grade) per slot of each probe prompt: float64 arrays [size, 4]."""
    if hasattr(scorer, "slot_probs"):
        return [np.asarray(x, dtype=np.float64) for x in scorer.slot_probs(prompts)]
    readouts = scorer.score_prompts(prompts)
    if any(r.probs is None for ro in readouts for r in ro):
        raise InvalidInput(f"scorer {scorer.name} gives no grade probabilities; CapCal needs them")
    return [np.asarray([r.probs for r in ro], dtype=np.float64) for ro in readouts]


def calibrate_query(rows: pl.DataFrame, priors: Mapping[int, np.ndarray], beta: float = 1.0,
                    eps: float = EPS) -> pl.DataFrame:
    """One query's stored rows with p0..p3 replaced by the calibrated p' and score = E[g] under p'.

    ``priors[size]`` is the content-free prior [size, 4] of a prompt of that many documents;
    a row's prompt size is the number of rows sharing its (perturbation, presentation, prompt).
    """
    size = pl.len().over("perturbation", "presentation", "prompt").alias("_size")
    rows = rows.with_columns(size)
    raw = rows.select("p0", "p1", "p2", "p3").to_numpy().astype(np.float64)
    q = np.empty_like(raw)
    for i, (b, s) in enumerate(zip(rows["_size"].to_list(), rows["slot"].to_list())):
        q[i] = priors[b][s]
    cal = calibrate_probs(raw, q, beta, eps)
    return rows.drop("_size").with_columns(
        pl.Series("score", expected_grade(cal), dtype=pl.Float64),
        *(pl.Series(f"p{g}", cal[:, g], dtype=pl.Float32) for g in range(4)),
    )


_LOCAL_KEYS = ("path", "adapter", "source")


def _model_conflict(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict:
    """Keys naming the model (name, id, revision, package, file, sha256, ...) on which
    two descriptions disagree; machine-local paths and the source kind do not count."""
    if not a or not b:
        return {}
    return {k: (a[k], b[k]) for k in a.keys() & b.keys() if k not in _LOCAL_KEYS and a[k] != b[k]}


def _check_source(meta: Mapping[str, Any], source_path: Any, *, protocol: Protocol,
                  template_sha256: str | None, model: Mapping[str, Any] | None) -> None:
    """The reused scores must come from the same model, prompt and protocol, single-pass."""
    here = protocol.as_dict()  # as the scores file records it
    params = meta.get("params") or {}
    sv = params.get("variant") or {}
    if meta.get("kind") != "scores":
        raise InvalidInput(f"{source_path}: not a scores file (metadata kind {meta.get('kind')!r})")
    if sv.get("calibration") != "none" or sv.get("bsc_k") != 1:
        raise InvalidInput(f"{source_path}: CapCal reuses an uncalibrated single-pass run (bsc_k 1, calibration "
                         f"none); this one has calibration {sv.get('calibration')!r}, bsc_k {sv.get('bsc_k')!r}")
    sp = params.get("protocol") or {}
    diff = sorted(k for k in set(sp) | set(here) if sp.get(k) != here.get(k))
    if diff:
        raise InvalidInput(f"{source_path}: reused scores were made under another protocol; differing key(s) "
                           + ", ".join(f"{k}: {sp.get(k)!r} there vs {here.get(k)!r} here" for k in diff))
    if template_sha256 is not None and meta.get("template_sha256") != template_sha256:
        raise InvalidInput(f"{source_path}: reused scores used prompt template {meta.get('template_sha256')}, "
                         f"the probe scorer uses {template_sha256}")
    conflict = _model_conflict((meta.get("scorer") or {}).get("model"), model)
    if conflict:
        raise InvalidInput(f"{source_path}: reused scores come from another model (there vs here: {conflict})")


def calibrate_scores(
    source: pl.DataFrame,
    queries: Mapping[str, str],
    scorer: Any,
    *,
    beta: float = 1.0,
    eps: float = EPS,
    done_dir: str | os.PathLike | None = None,
    cache: Any = None,
) -> tuple[pl.DataFrame, dict[str, dict[int, list]]]:
    """CapCal over stored single-pass probabilities: (calibrated rows, priors per query).

    The only model work is the content-free probes, one prompt per (query, prompt
    size); the documents are never read again. With ``done_dir`` each query's prior is
    flushed there (JSON, atomically) and reused by a resumed run; ``cache`` (the probes'
    read cache, journaling into ``done_dir``) records the reads behind it first.
    """
    need = ("query_id", "perturbation", "presentation", "prompt", "slot", "p0", "p1", "p2", "p3")
    missing = [c for c in need if c not in source.columns]
    if missing:
        raise InvalidInput(f"scores to calibrate lack column(s) {missing}")
    nulls = source.filter(pl.any_horizontal(pl.col("p0", "p1", "p2", "p3").is_null()))
    if nulls.height:
        r = nulls.row(0, named=True)
        raise InvalidInput(f"CapCal needs grade probabilities; query {r['query_id']!r} doc {r.get('doc_id')!r} "
                         f"({r['perturbation']} {r['presentation']}) has none (an identity or hosted run?)")
    out, priors = [], {}
    by_text: dict[str, dict[int, np.ndarray]] = {}  # the prior is a function of the query text and B only
    for (qid,), rows in source.group_by("query_id", maintain_order=True):
        if qid not in queries:
            raise InvalidInput(f"scores name query {qid!r}, which is not in the candidates")
        sizes = sorted(set(rows.group_by("perturbation", "presentation", "prompt").len()["len"].to_list()))
        text = queries[qid]
        path = Path(done_dir) / f"prior-{hashlib.sha256(text.encode()).hexdigest()[:40]}.json" if done_dir else None
        known = by_text.setdefault(text, {})
        if path is not None and path.exists() and not known:
            known.update({int(b): np.asarray(q) for b, q in json.loads(path.read_text(encoding="utf-8")).items()})
        todo = [b for b in sizes if b not in known]
        if todo:
            known.update(zip(todo, probe_probs(scorer, content_free_prompts(text, todo))))
            if cache is not None:
                cache.checkpoint()
            if path is not None:
                write_text_atomic(path, json.dumps({str(b): q.tolist() for b, q in known.items()}))
        got = {b: known[b] for b in sizes}
        out.append(calibrate_query(rows, got, beta, eps))
        priors[str(qid)] = {int(b): got[b].tolist() for b in sizes}
    return pl.concat(out), priors


def calibrate_scores_file(
    *,
    source_path: str | os.PathLike,
    candidates_path: str | os.PathLike,
    out_path: str | os.PathLike,
    dataset: str,
    run: ScoringRun,
    protocol: Protocol,
    scorer: Any = None,
    cache: Any = None,
) -> Path:
    """The capcal variant's scoring job: reuse ``source_path``'s probabilities, probe, calibrate.

    Output rows are the source's rows (same presentations, positions, prompts, slots)
    with p0..p3 = the calibrated distribution p' and score = E[g] under p'; the raw
    probabilities stay in the reused file, named with its sha256 in the metadata. ``cache``:
    the read cache ``scorer`` reads through (its journal lives in the resume folder).
    """
    v = run.variant
    if v.calibration != "capcal" or v.bsc_k != 1:
        raise InvalidInput(f"calibrate_scores_file is the capcal job (bsc_k 1); variant has calibration "
                         f"{v.calibration!r}, bsc_k {v.bsc_k}")
    beta = float(run.setting("capcal_beta"))
    meta = read_metadata(source_path)
    source = read_table(source_path, "scores")
    cand = read_table(candidates_path, "candidates")
    if scorer is None:
        scorer = make_scorer(run, protocol.prompt)
    describe = scorer.describe() if hasattr(scorer, "describe") else {"scorer": getattr(scorer, "name", "?")}
    sha = getattr(scorer, "template_sha256", None)
    _check_source(meta, source_path, protocol=protocol, template_sha256=sha, model=describe.get("model"))
    source_sha = sha256_file(source_path)
    fingerprint = json.dumps({"presdep_version": __version__, "source_sha256": source_sha, "scorer": describe,
                              "beta": beta, "eps": EPS, "queries": sha256_file(candidates_path)},
                             sort_keys=True, default=str)
    done = resume_dir(partial_dir(out_path), fingerprint)
    if cache is not None:  # the probes a killed run made belong in this job's shard
        cache.keep_journal(done)
    queries = dict(cand.select("query_id", "query").unique("query_id").iter_rows())
    calibrated, priors = calibrate_scores(source, queries, scorer, beta=beta, done_dir=done, cache=cache)
    path = write_table(
        calibrated.sort("perturbation", "presentation", "query_id", "position"), out_path, "scores",
        params={"variant": run.as_dict(), "protocol": protocol.as_dict()},
        **{k: meta.get(k) for k in ("perturbations", "presentations", "middle_injection_skipped")},
        dataset=dataset, bsc_k=1, bsc_ensembles=v.bsc_ensembles,
        template_sha256=sha, model=describe.get("model"), scorer=describe,
        capcal={"reuses": str(source_path), "reuses_sha256": source_sha, "beta": beta, "eps": EPS,
                "probs": "p0..p3 are the calibrated p'; the raw ones are in the reused file",
                "probe_prompts": sum(len(x) for x in priors.values()), "priors": priors},
    )
    shutil.rmtree(done)
    return path


