"""The ``scores`` table as per-query blocks: every presentation of one query under one
perturbation, aligned by doc and validated (each presentation holds the same docs once)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput

_REQUIRED = ("query_id", "doc_id", "perturbation", "presentation", "score")


@dataclass
class Block:
    """All presentations of one query under one perturbation, aligned by doc."""

    query_id: str
    doc_ids: list[str]  # ascending
    presentations: np.ndarray  # (M,) ascending presentation ids
    scores: np.ndarray  # (M, n)
    positions: np.ndarray | None  # (M, n) presented position (as stored) or None


def _fail_missing(df: pl.DataFrame, pert: str, qid: str) -> None:
    sub = df.filter((pl.col("perturbation") == pert) & (pl.col("query_id") == qid)).sort("presentation")
    every = set(sub["doc_id"].to_list())
    for (m,), part in sub.group_by(["presentation"], maintain_order=True):
        lacking = sorted(every - set(part["doc_id"].to_list()))
        if lacking:
            raise InvalidInput(
                f"scores: query {qid!r} (perturbation {pert!r}) presentation {m} lacks doc(s) "
                f"{lacking[:5]}{' ...' if len(lacking) > 5 else ''}; every presentation of a query "
                f"must hold the same candidates exactly once"
            )
    raise InvalidInput(f"scores: query {qid!r} (perturbation {pert!r}) has inconsistent presentations")


def build_blocks(scores: pl.DataFrame) -> dict[str, list[Block]]:
    """Validate a ``scores`` table and split it into {perturbation: [Block per query]}.

    Raises ValueError naming the query when a presentation lacks a doc, has a doc
    twice, or holds a NaN score.
    """
    missing = [c for c in _REQUIRED if c not in scores.columns]
    if missing:
        raise InvalidInput(f"scores lacks column(s) {missing}; expected at least {list(_REQUIRED)}")
    has_pos = "position" in scores.columns
    cols = list(_REQUIRED) + (["position"] if has_pos else [])
    df = scores.select(cols).with_columns(
        pl.col("query_id").cast(pl.String),
        pl.col("doc_id").cast(pl.String),
        pl.col("perturbation").cast(pl.String),
        pl.col("presentation").cast(pl.Int64),
        pl.col("score").cast(pl.Float64),
    )
    for c in cols:
        if df[c].null_count():
            row = int(df[c].is_null().arg_max())
            raise InvalidInput(f"scores: column {c!r} is null at row {row} (query {df['query_id'][row]!r})")
    nan = df["score"].is_nan()
    if nan.any():
        r = df.row(int(nan.arg_max()), named=True)
        raise InvalidInput(
            f"scores: query {r['query_id']!r} (perturbation {r['perturbation']!r}, presentation "
            f"{r['presentation']}) has a NaN score for doc {r['doc_id']!r}"
        )
    # Integer codes in string order (Enum categories given sorted), then one numpy lexsort:
    # far cheaper than sorting millions of strings.
    pert_u, pc = _codes(df["perturbation"])
    q_u, qc = _codes(df["query_id"])
    d_u, dc = _codes(df["doc_id"])
    pres = df["presentation"].to_numpy()
    order = np.lexsort((dc, pres, qc, pc))
    pc, qc, dc, pres = pc[order], qc[order], dc[order], pres[order]
    score = df["score"].to_numpy()[order]
    pos = df["position"].cast(pl.Int64).to_numpy()[order] if has_pos else None

    same_group = (pc[1:] == pc[:-1]) & (qc[1:] == qc[:-1])
    same_pres = same_group & (pres[1:] == pres[:-1])
    dup = same_pres & (dc[1:] == dc[:-1])
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InvalidInput(
            f"scores: query {q_u[qc[i]]!r} (perturbation {pert_u[pc[i]]!r}) presentation "
            f"{pres[i]} has doc {d_u[dc[i]]!r} twice"
        )
    total = len(pc)
    g_start = np.flatnonzero(np.r_[True, ~same_group]) if total else np.zeros(0, np.int64)
    g_end = np.r_[g_start[1:], total]
    p_start = np.flatnonzero(np.r_[True, ~same_pres]) if total else np.zeros(0, np.int64)
    p_len = np.diff(np.r_[p_start, total])
    first_p = np.searchsorted(p_start, g_start)  # index of each group's first presentation
    n_pres = np.diff(np.r_[first_p, len(p_start)])
    n_docs = p_len[first_p]
    # Every presentation of a group must list exactly the docs of its first presentation.
    ok = np.ones(len(g_start), dtype=bool)
    if total:
        ok &= np.maximum.reduceat(p_len, first_p) == np.minimum.reduceat(p_len, first_p)
        ok &= n_pres * n_docs == g_end - g_start
        row_group = np.repeat(np.arange(len(g_start)), g_end - g_start)
        offset = np.arange(total) - g_start[row_group]
        ref = g_start[row_group] + offset % n_docs[row_group]
        ok &= np.logical_and.reduceat(dc == dc[ref], g_start)
    if not ok.all():
        g = int(np.flatnonzero(~ok)[0])
        _fail_missing(df, pert_u[pc[g_start[g]]], q_u[qc[g_start[g]]])

    d_arr = np.asarray(d_u, dtype=object)
    out: dict[str, list[Block]] = {}
    for g, (a, b) in enumerate(zip(g_start.tolist(), g_end.tolist())):
        m, n = int(n_pres[g]), int(n_docs[g])
        out.setdefault(pert_u[pc[a]], []).append(
            Block(
                query_id=q_u[qc[a]],
                doc_ids=d_arr[dc[a : a + n]].tolist(),
                presentations=pres[a:b:n].copy(),
                scores=score[a:b].reshape(m, n),
                positions=None if pos is None else pos[a:b].reshape(m, n),
            )
        )
    return out


def _codes(series: pl.Series) -> tuple[list[str], np.ndarray]:
    """(sorted unique strings, code of each row); codes follow string (byte) order."""
    uniq = series.unique().sort()
    codes = series.cast(pl.Enum(uniq)).to_physical().cast(pl.Int64).to_numpy()
    return uniq.to_list(), codes


def position_ranks(blocks: list[Block]) -> np.ndarray:
    """(Q, M, n) 0-based presented positions of blocks of equal shape (ranks of the stored
    positions within each presentation; stored 0..n-1 pass through)."""
    p = np.stack([b.positions for b in blocks])
    srt = np.sort(p, axis=2)
    if (srt == np.arange(p.shape[2])).all():
        return p
    dup = (np.diff(srt, axis=2) == 0).any(axis=2)
    if dup.any():
        qi, m = (int(x[0]) for x in np.nonzero(dup))
        raise InvalidInput(
            f"scores: query {blocks[qi].query_id!r} presentation {blocks[qi].presentations[m]} places "
            f"two docs at the same position"
        )
    return p.argsort(axis=2).argsort(axis=2)
