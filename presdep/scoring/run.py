"""Score every presentation of every query of a dataset into one ``scores`` file.

One job loops over all presentations (never a wildcard per presentation). Each
finished query is flushed to a sidecar folder ``<out>.partial/`` (one Arrow IPC
file per query, written atomically), so a job killed at any point resumes where
it stopped; the final Parquet is written atomically and equals an uninterrupted
run's, and the sidecar is then removed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from presdep import __version__
from presdep.presentations import (
    CHUNKINGS,
    PERTURBATIONS,
    NoRelevantDocument,
    chunk_positions,
    middle_injection,
    random_shuffle,
    shuffle_seed,
    stable_seed,
    within_chunk,
)
from presdep.resume import partial_dir, resume_dir
from presdep.schemas import SCHEMAS, atomic_write, write_table
from presdep.scoring import make_scorer
from presdep.scoring.template import prepare_doc

log = logging.getLogger(__name__)

CANONICAL = "canonical"
CANDIDATE_COLUMNS = ("query_id", "query", "doc_id", "doc", "first_stage_rank")
VARIANT_DEFAULTS: dict[str, Any] = {
    "chunking": "contiguous",
    "calibration": "none",
    "bsc_k": 1,
}
PROTOCOL_DEFAULTS: dict[str, Any] = {"max_doc_chars": 1200}
_SCORE_COLS = SCHEMAS["scores"].names


def resolve_variant(variant: Mapping[str, Any]) -> dict:
    v = {**VARIANT_DEFAULTS, **copy.deepcopy(dict(variant))}
    if "scorer" not in v:
        raise ValueError(f"variant lacks 'scorer' (one of identity, transformers, vllm): {v}")
    if v["chunking"] not in CHUNKINGS:
        raise ValueError(f"variant chunking {v['chunking']!r} not in {CHUNKINGS}")
    if v["calibration"] not in ("none", "capcal"):
        raise ValueError(f"variant calibration {v['calibration']!r} not in ('none', 'capcal')")
    k = v["bsc_k"]
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"variant bsc_k must be an integer >= 1, got {k!r}")
    return v


def resolve_protocol(protocol: Mapping[str, Any]) -> dict:
    p = {**PROTOCOL_DEFAULTS, **copy.deepcopy(dict(protocol))}
    for key in ("seed", "M", "B", "perturbations", "max_doc_chars"):
        if key not in p:
            raise ValueError(f"protocol lacks {key!r}; got keys {sorted(p)}")
    for key in ("seed", "M", "B", "max_doc_chars"):
        if not isinstance(p[key], int) or isinstance(p[key], bool):
            raise ValueError(f"protocol {key} must be an integer, got {p[key]!r}")
    if p["B"] < 1 or p["M"] < 0 or p["max_doc_chars"] < 1:
        raise ValueError(f"protocol needs B >= 1, M >= 0, max_doc_chars >= 1: {p}")
    perts = list(p["perturbations"])
    bad = [x for x in perts if x not in PERTURBATIONS]
    if bad or len(set(perts)) != len(perts):
        raise ValueError(f"protocol perturbations {perts} must be distinct names from {PERTURBATIONS}")
    if p["M"] < 1 and ({"random_shuffle", "within_chunk"} & set(perts)):
        raise ValueError("protocol M must be >= 1 for random_shuffle / within_chunk")
    p["perturbations"] = perts
    return p


def _check_candidates(c: pl.DataFrame) -> None:
    missing = [x for x in CANDIDATE_COLUMNS if x not in c.columns]
    if missing:
        raise ValueError(f"candidates lack column(s) {missing}; have {c.columns}")
    if c.height == 0:
        raise ValueError("candidates table is empty")
    dup = c.select("query_id", "doc_id").is_duplicated()
    if dup.any():
        r = int(dup.arg_max())
        raise ValueError(f"candidates: duplicate (query_id, doc_id) = ({c['query_id'][r]!r}, {c['doc_id'][r]!r})")
    dup = c.select("query_id", "first_stage_rank").is_duplicated()
    if dup.any():
        r = int(dup.arg_max())
        raise ValueError(f"candidates: query {c['query_id'][r]!r} repeats first_stage_rank {c['first_stage_rank'][r]}")
    nq = c.group_by("query_id").agg(pl.col("query").n_unique().alias("n")).filter(pl.col("n") > 1)
    if nq.height:
        raise ValueError(f"candidates: query {nq['query_id'][0]!r} has more than one query text")


def _sha256_frame(df: pl.DataFrame | None) -> str | None:
    if df is None:
        return None
    h = hashlib.sha256()
    for name in df.columns:
        h.update(name.encode() + b"\x00")
        for v in df[name].to_list():
            h.update(repr(v).encode() + b"\x1f")
    return h.hexdigest()


def _file_sha256(path: str | os.PathLike | None) -> str | None:
    if path is None:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _Unit:
    """One stored presentation: K member orders (K = 1 unless BSC)."""

    __slots__ = ("perturbation", "presentation", "members")

    def __init__(self, perturbation: str, presentation: int, members: list[list[int]]):
        self.perturbation = perturbation
        self.presentation = presentation
        self.members = members


def _units_for_query(
    qid: str, n: int, grades: Mapping[str, int] | None, doc_ids: Sequence[str],
    dataset: str, v: dict, p: dict,
) -> list[_Unit]:
    """All presentations of one query, as orders of indices into first-stage order."""
    base = list(range(n))
    seed, m_count, b, k = p["seed"], p["M"], p["B"], v["bsc_k"]
    lists: list[tuple[str, int, list[int]]] = []
    for pert in p["perturbations"]:
        if pert == "random_shuffle":
            for m in range(m_count):
                lists.append((pert, m, random_shuffle(base, shuffle_seed(seed, dataset, qid, m))))
        elif pert == "within_chunk":
            for m in range(m_count):
                s = stable_seed(seed, dataset, qid, "within_chunk", m)
                lists.append((pert, m, within_chunk(base, b, s, v["chunking"])))
        elif pert == "middle_injection":
            if grades is None:
                continue
            try:
                injected = middle_injection(list(doc_ids), grades)  # ties by doc id, not index
            except NoRelevantDocument:
                continue
            index = {d: i for i, d in enumerate(doc_ids)}
            for m, order in enumerate(injected):
                lists.append((pert, m, [index[d] for d in order]))
    units = [_Unit(CANONICAL, 0, [base])]  # canonical: first-stage order, single pass
    for pert, m, order in lists:
        if k == 1:
            units.append(_Unit(pert, m, [order]))
        else:
            # BSC: presentation m is served as K independent shuffles of its list.
            members = [random_shuffle(order, stable_seed(seed, dataset, qid, "bsc", m, kk)) for kk in range(k)]
            units.append(_Unit(pert, m, members))
    return units


def _score_query(
    qid: str, group: pl.DataFrame, grades: Mapping[str, int] | None,
    dataset: str, v: dict, p: dict, scorer: Any, calibrator: Any,
) -> pl.DataFrame:
    group = group.sort("first_stage_rank")
    doc_ids = group["doc_id"].to_list()
    ranks = group["first_stage_rank"].to_list()
    query = group["query"][0]
    docs = [prepare_doc(t, p["max_doc_chars"]) for t in group["doc"].to_list()]
    n = len(doc_ids)
    units = _units_for_query(qid, n, grades, doc_ids, dataset, v, p)

    # Every prompt of every member of every unit: (unit, member, prompt index, doc indices).
    prompt_pos = chunk_positions(n, p["B"], v["chunking"])
    layout: list[tuple[int, int, int, list[int]]] = []
    for ui, unit in enumerate(units):
        for mi, order in enumerate(unit.members):
            for j, pos in enumerate(prompt_pos):
                layout.append((ui, mi, j, [order[x] for x in pos]))

    if getattr(scorer, "first_stage", False):
        readouts = [scorer.score_ranked([ranks[i] for i in idx], n) for *_, idx in layout]
    else:
        readouts = scorer.score_prompts([(query, [docs[i] for i in idx]) for *_, idx in layout])
    if len(readouts) != len(layout):
        raise RuntimeError(f"scorer {scorer.name} returned {len(readouts)} prompts for {len(layout)}")

    n_units = len(units)
    kmax = max(len(u.members) for u in units)
    score = np.full((n_units, kmax, n), np.nan)
    probs = np.full((n_units, kmax, n, 4), np.nan)
    where = np.full((n_units, 3, n), -1, dtype=np.int64)  # position, prompt, slot of member 0
    has_probs = True
    for (ui, mi, j, idx), ro in zip(layout, readouts):
        if len(ro) != len(idx):
            raise RuntimeError(f"scorer {scorer.name} returned {len(ro)} readouts for {len(idx)} documents")
        raw = None
        if all(r.probs is not None for r in ro):
            raw = np.asarray([r.probs for r in ro], dtype=np.float64)
            probs[ui, mi, idx] = raw
        else:
            has_probs = False
        if calibrator is not None:
            if raw is None:
                raise ValueError(f"CapCal needs grade probabilities; scorer {scorer.name} gave none")
            score[ui, mi, idx] = calibrator.calibrated_scores(raw, np.arange(len(idx)))
        else:
            score[ui, mi, idx] = [r.score for r in ro]
        if mi == 0:
            for s, (d, pos) in enumerate(zip(idx, prompt_pos[j])):
                where[ui, :, d] = (pos, j, s)

    frames = []
    for ui, unit in enumerate(units):
        k = len(unit.members)
        mean_score = score[ui, :k].mean(axis=0)
        cols: dict[str, Any] = {
            "query_id": [qid] * n,
            "doc_id": doc_ids,
            "perturbation": [unit.perturbation] * n,
            "presentation": np.full(n, unit.presentation, dtype=np.int32),
            "position": where[ui, 0].astype(np.int32),
            "prompt": where[ui, 1].astype(np.int32),
            "slot": where[ui, 2].astype(np.int32),
            "score": mean_score.astype(np.float64),
        }
        if has_probs:
            mp = probs[ui, :k].mean(axis=0).astype(np.float32)
            for g in range(4):
                cols[f"p{g}"] = mp[:, g]
        else:
            for g in range(4):
                cols[f"p{g}"] = pl.Series(f"p{g}", [None] * n, dtype=pl.Float32)
        frames.append(pl.DataFrame(cols))
    out = pl.concat(frames).select(_SCORE_COLS)
    if (out["position"] < 0).any() or out["score"].is_nan().any():
        raise RuntimeError(f"query {qid!r}: a document was not scored in some presentation")
    return out


def _partial_name(qid: str) -> str:
    return "q-" + hashlib.sha256(qid.encode("utf-8")).hexdigest()[:40] + ".arrow"


def _write_ipc_atomic(df: pl.DataFrame, path: Path) -> None:
    atomic_write(path, df.write_ipc)


def score_dataset(
    candidates: pl.DataFrame,
    *,
    dataset: str,
    variant: Mapping[str, Any],
    protocol: Mapping[str, Any],
    out_path: str | os.PathLike,
    qrels: pl.DataFrame | None = None,
    scorer: Any = None,
    capcal_prior_path: str | os.PathLike | None = None,
) -> None:
    """Score the canonical order and every presentation of ``protocol["perturbations"]``.

    Writes the ``scores`` contract to ``out_path`` (atomically), resuming from
    ``<out_path>.partial/`` when a previous run with the same inputs was killed.
    """
    v, p = resolve_variant(variant), resolve_protocol(protocol)
    _check_candidates(candidates)
    out_path = Path(out_path)
    if scorer is None:
        scorer = make_scorer(v, p)
    template_sha = getattr(scorer, "template_sha256", None)
    describe = scorer.describe() if hasattr(scorer, "describe") else {"scorer": getattr(scorer, "name", "?")}

    calibrator = None
    if v["calibration"] == "capcal":
        if getattr(scorer, "first_stage", False):
            raise ValueError("calibration 'capcal' needs a model scorer, not identity")
        if capcal_prior_path is None:
            raise ValueError("calibration 'capcal' needs capcal_prior_path (the cached content-free prior)")
        from presdep.scoring.capcal import CapCal

        calibrator = CapCal.from_file(
            capcal_prior_path, B=p["B"], template_sha256=template_sha,
            model=describe.get("model"), beta=float(v.get("capcal_beta", 1.0)),
        )

    grades_by_q: dict[str, dict[str, int]] = {}
    if qrels is not None:
        for qid, did, rel in qrels.select("query_id", "doc_id", "relevance").iter_rows():
            grades_by_q.setdefault(str(qid), {})[str(did)] = int(rel)
    qids = candidates["query_id"].unique(maintain_order=True).to_list()

    skipped: list[str] = []
    if "middle_injection" in p["perturbations"]:
        if qrels is None:
            raise ValueError("perturbation middle_injection needs qrels (the strongest relevant document)")
        cand_docs = candidates.group_by("query_id").agg(pl.col("doc_id"))
        for qid, dids in cand_docs.iter_rows():
            g = grades_by_q.get(qid, {})
            if not any(g.get(d, 0) >= 1 for d in dids):
                skipped.append(qid)
        skipped.sort()
        if skipped:
            log.warning(
                "%s: middle_injection skipped for %d of %d queries without a relevant candidate in qrels: %s",
                dataset, len(skipped), len(qids), ", ".join(skipped[:10]) + (" ..." if len(skipped) > 10 else ""),
            )

    fingerprint = {
        "presdep_version": __version__,
        "dataset": dataset,
        "variant": v,
        "protocol": p,
        "scorer": describe,
        "template_sha256": template_sha,
        "candidates_sha256": _sha256_frame(candidates.select(*CANDIDATE_COLUMNS).sort("query_id", "first_stage_rank")),
        "qrels_sha256": _sha256_frame(qrels.select("query_id", "doc_id", "relevance").sort("query_id", "doc_id")) if qrels is not None else None,
        "capcal_prior_sha256": _file_sha256(capcal_prior_path) if calibrator is not None else None,
    }
    partial = resume_dir(partial_dir(out_path), json.dumps(fingerprint, sort_keys=True, default=str))

    groups = {qid: g for (qid,), g in candidates.group_by("query_id", maintain_order=True)}
    done = {q for q in qids if (partial / _partial_name(q)).exists()}
    if done:
        log.info("%s: resuming, %d of %d queries already scored", dataset, len(done), len(qids))
    with tqdm(total=len(qids), initial=len(done), desc=f"score {dataset}", unit="query") as bar:
        for qid in qids:
            if qid in done:
                continue
            grades = grades_by_q.get(qid) if "middle_injection" in p["perturbations"] else None
            df = _score_query(qid, groups[qid], grades, dataset, v, p, scorer, calibrator)
            _write_ipc_atomic(df, partial / _partial_name(qid))
            bar.update(1)

    frames = [pl.read_ipc(partial / _partial_name(q)) for q in qids]
    scores = pl.concat(frames).sort("perturbation", "presentation", "query_id", "position")
    write_table(
        scores, out_path, "scores",
        params={"variant": v, "protocol": p},
        dataset=dataset,
        perturbations=[CANONICAL, *p["perturbations"]],
        template_sha256=template_sha,
        model=describe.get("model"),
        scorer=describe,
        middle_injection_skipped=skipped,
        capcal_prior_sha256=fingerprint["capcal_prior_sha256"],
    )
    shutil.rmtree(partial)


__all__ = ["score_dataset", "resolve_variant", "resolve_protocol", "CANONICAL"]
