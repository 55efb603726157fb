"""The flip ledger: for every flipped decision, the first cause that explains it.

A row is one decision (a document's membership of the retained set at t* or of the
matched cut; the reader's input or answer; the selected response or the preference pair)
whose value differs between two presentations a < b of the random shuffles (BSC: of the
ensembles). Its cause is the first of, in this order (docs/methods/flip-ledger.md):

1. ``tie``: a margin of exactly 0 in a or b (the tie rule set the value);
2. ``noise``: the decision also flips among the noise reads (the first-stage pass and its
   ``batch_noise`` re-reads), or noise as large as the re-reads show (the floor w) could
   reverse a or b: min(margin_a, margin_b) <= kappa * w;
3. ``parse``: a read the decision rests on in a or b was repaired (a ``repaired`` flag);
4. ``slot``: the additive doc + slot least-squares fit, put through the same rule, gives
   the same values in a and b;
5. ``companions``: the decision is the same in the ``within_chunk`` presentations (companions
   fixed); for ``retained``, in those that show d in the slots a and b showed it in;
6. ``content`` (the stored key; reports say "not explained by an additive slot effect",
   REMAINDER_WORDS): none of the above. It is a remainder, not a finding about content: a
   flip lands here when no earlier test passed, including tests that could not be evaluated
   (noise needs ``protocol.noise_rereads`` >= 2, companions ``within_chunk`` presentations).

A test that the data cannot evaluate is skipped for that row (null in its column) and
never counted as passed or failed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import BATCH_NOISE, CANONICAL_PRESENTATION, RANDOM_SHUFFLE, decision_presentations
from presdep.metrics.flip_rules import Matched, Pair, ReaderInput, Retained, Selected, additive_fit
from presdep.metrics.qa import normalize_answer

CAUSES = ("tie", "noise", "parse", "slot", "companions", "content")
TESTED_CAUSES = CAUSES[:-1]  # content is the remainder: always "evaluable"
# What a person reads for each cause key. The remainder keeps its stored key "content" (the
# ledger's Parquet column, the metrics rows and the counts file read it), but says what it is:
# the additive doc + slot fit did not reproduce the flip, and nothing tested before it did.
REMAINDER_WORDS = "not explained by an additive slot effect"
CAUSE_WORDS = {**{c: c for c in TESTED_CAUSES}, "content": REMAINDER_WORDS}
DECISIONS = {"rerank": ("retained", "matched"), "qa": ("reader_input", "answer"), "response": ("selected", "pair")}
WITHIN_CHUNK = "within_chunk"
READER_K = 5  # the reader's headline k (presdep.scoring.reader)

LEDGER_SCHEMA = pl.Schema({
    "decision": pl.String,
    "query_id": pl.String,
    "doc_id": pl.String,  # null for the per-query decisions
    "presentation_a": pl.Int32,
    "presentation_b": pl.Int32,
    "value_a": pl.String,
    "value_b": pl.String,
    "score_a": pl.Float64,
    "score_b": pl.Float64,
    "margin_a": pl.Float64,
    "margin_b": pl.Float64,
    "noise_floor": pl.Float64,
    "fit_a": pl.Float64,
    "fit_b": pl.Float64,
    **{c: pl.Boolean for c in TESTED_CAUSES},  # null: not evaluable for the row
    "cause": pl.String,
})


@dataclass
class _Reads:
    scores: np.ndarray  # (m, n), documents in ascending id order
    positions: np.ndarray  # (m, n)
    slots: np.ndarray | None = None  # (m, n) where the scores carry them


@dataclass
class _Query:
    qid: str
    doc_ids: list[str]
    presentations: np.ndarray  # (M,) ascending
    real: _Reads
    noise: _Reads | None = None
    within: _Reads | None = None
    fitted: np.ndarray | None = None  # (M, n): the slot fit put together like the real scores
    repaired: np.ndarray | None = None  # (M, n) bool


def _grids(rows: pl.DataFrame, cols: Sequence[str], what: str) -> dict[str, tuple[list[str], np.ndarray, dict]]:
    """Per query: (doc ids ascending, presentations ascending, {column: (m, n) array})."""
    out: dict[str, tuple[list[str], np.ndarray, dict]] = {}
    if rows.height == 0:
        return out
    rows = rows.sort("query_id", "presentation", "doc_id")
    for (q,), part in rows.group_by(["query_id"], maintain_order=True):
        pres, counts = np.unique(part["presentation"].to_numpy(), return_counts=True)
        n = int(counts[0])
        ids = part["doc_id"].to_list()
        docs = ids[:n]
        if (counts != n).any() or len(set(docs)) != n or ids != docs * len(pres):
            raise InvalidInput(f"scores: query {q!r} ({what}): every presentation must hold the same documents once")
        out[str(q)] = (docs, pres, {c: part[c].to_numpy().reshape(len(pres), n) for c in cols})
    return out


def _same_docs(q: str, want: list[str], got: list[str], what: str) -> None:
    if want != got:
        raise InvalidInput(f"scores: query {q!r}: the {what} rows hold other documents than its random shuffles")


def _load(scores: pl.DataFrame, queries: Sequence[str] | None, bsc_k: int, ensembles: int) -> list[_Query]:
    real = decision_presentations(scores, bsc_k=bsc_k, ensembles=ensembles)
    if queries is not None:
        real = real.filter(pl.col("query_id").is_in([str(q) for q in queries]))
    if real["score"].is_nan().any():
        raise InvalidInput("scores: a random_shuffle score is NaN; a decision needs comparable scores")
    keep = pl.col("query_id").cast(pl.String).is_in(real["query_id"].unique().to_list())
    raw = scores.filter((pl.col("perturbation") == RANDOM_SHUFFLE) & keep)
    if bsc_k > 1:
        raw = raw.filter(pl.col("presentation") < bsc_k * ensembles)
    has_slot, has_repair = "slot" in raw.columns, "repaired" in raw.columns
    raw = raw.select(
        pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String), pl.col("presentation").cast(pl.Int64),
        pl.col("score").cast(pl.Float64),
        *([pl.col("slot").cast(pl.Int64)] if has_slot else []),
        # a null flag: this read's repair is unknown, so the query's parse test is not evaluable
        *([pl.col("repaired").fill_null(False).cast(pl.Boolean),
           pl.col("repaired").is_not_null().alias("repaired_known")] if has_repair else []),
    )
    raw_cols = ["score"] + ["slot"] * has_slot + ["repaired", "repaired_known"] * has_repair
    noise_rows = scores.filter(pl.col("perturbation").is_in([FIRST_STAGE, BATCH_NOISE]) & keep).select(
        pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String),
        # the first-stage pass is read -1, its re-reads 0..R-1: all reads of the same prompts
        pl.when(pl.col("perturbation") == FIRST_STAGE).then(-1).otherwise(pl.col("presentation"))
        .cast(pl.Int64).alias("presentation"),
        pl.col("score").cast(pl.Float64), pl.col("position").cast(pl.Int64),
        (pl.col("perturbation") == BATCH_NOISE).alias("reread"),
    )
    if "repaired" in scores.columns:  # a repaired re-read changes by the parse rule, not by noise
        dirty = scores.filter(pl.col("perturbation").is_in([FIRST_STAGE, BATCH_NOISE])
                              & pl.col("repaired").fill_null(False))
        dirty = dirty.select(
            pl.col("query_id").cast(pl.String),
            pl.when(pl.col("perturbation") == FIRST_STAGE).then(-1).otherwise(pl.col("presentation"))
            .cast(pl.Int64).alias("presentation")).unique()
        noise_rows = noise_rows.join(dirty, on=["query_id", "presentation"], how="anti")
    within = scores.filter(keep & (pl.col("perturbation") == WITHIN_CHUNK)) if bsc_k == 1 else scores.clear()
    within = within.select(
        pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String), pl.col("presentation").cast(pl.Int64),
        pl.col("score").cast(pl.Float64), pl.col("position").cast(pl.Int64),
        *([pl.col("slot").cast(pl.Int64)] if has_slot else []),
    )
    g_real = _grids(real, ("score", "position"), "random_shuffle")
    g_raw = _grids(raw, raw_cols, "random_shuffle")
    g_noise = _grids(noise_rows, ("score", "position", "reread"), "noise reads")
    g_within = _grids(within, ("score", "position") + ("slot",) * has_slot, WITHIN_CHUNK)
    out = []
    for q in sorted(g_real):
        docs, pres, a = g_real[q]
        item = _Query(q, docs, pres, _Reads(a["score"].astype(np.float64), a["position"]))
        rdocs, rpres, r = g_raw[q]
        _same_docs(q, docs, rdocs, "random_shuffle")
        group = rpres // bsc_k  # the ensemble (or shuffle) each raw presentation belongs to
        if "slot" in r and not bsc_k > 1:
            item.real.slots = r["slot"]
        if "slot" in r and len(rpres) >= 2:
            fit = additive_fit(r["score"], r["slot"])
            item.fitted = np.stack([fit[group == e].mean(axis=0) for e in pres])
        if "repaired" in r and r["repaired_known"].all():
            item.repaired = np.stack([r["repaired"][group == e].astype(bool).any(axis=0) for e in pres])
        if q in g_noise:
            ndocs, _, nz = g_noise[q]
            _same_docs(q, docs, ndocs, "noise-read")
            if nz["reread"][:, 0].any() and nz["score"].shape[0] >= 2:
                item.noise = _Reads(nz["score"].astype(np.float64), nz["position"])
        if q in g_within and len(g_within[q][1]) >= 2:
            wdocs, _, w = g_within[q]
            _same_docs(q, docs, wdocs, WITHIN_CHUNK)
            item.within = _Reads(w["score"].astype(np.float64), w["position"], w.get("slot"))
        out.append(item)
    return out


def _floor(noise: _Reads) -> float:
    """The noise floor w: the largest change of one document's score between two noise reads."""
    s = noise.scores
    return float((s.max(axis=0) - s.min(axis=0)).max())


class _Tests:
    """Each cause's result per row and whether it could be evaluated there."""

    def __init__(self, k: int):
        self.k = k
        self.hit: dict[str, np.ndarray] = {}
        self.known: dict[str, np.ndarray] = {}

    def set(self, cause: str, hit: np.ndarray, known: np.ndarray | bool = True) -> None:
        self.hit[cause] = np.asarray(hit, dtype=bool)
        self.known[cause] = np.broadcast_to(np.asarray(known, dtype=bool), (self.k,)).copy()

    def columns(self) -> dict[str, np.ndarray]:
        cause = np.full(self.k, "content", dtype=object)
        open_ = np.ones(self.k, dtype=bool)
        out: dict[str, np.ndarray] = {}
        for c in TESTED_CAUSES:
            hit = self.hit.get(c, np.zeros(self.k, dtype=bool))
            known = self.known.get(c, np.zeros(self.k, dtype=bool))
            take = open_ & known & hit
            cause[take] = c
            open_ &= ~take
            out[c] = hit
            out[f"{c}_known"] = known
        out["cause"] = cause
        return out


def _doc_rows(rule, q: _Query, bsc: bool) -> dict[str, np.ndarray] | None:
    """Rows of a per-document rule (retained, matched) for one query."""
    real = rule.decide(q.real.scores, q.real.positions, q.doc_ids)
    v, mu = real.values, real.margins
    a, b = np.triu_indices(len(q.presentations), 1)
    pi, di = np.nonzero(v[a] != v[b])
    if pi.size == 0:
        return None
    pa, pb = a[pi], b[pi]
    ma, mb = mu[pa, di], mu[pb, di]
    t = _Tests(pi.size)
    t.set("tie", (ma == 0) | (mb == 0))
    floor = math.nan
    if q.noise is not None:
        floor = _floor(q.noise)
        hit = np.minimum(ma, mb) <= rule.kappa * floor
        if not bsc:  # a re-read is one read: its decision is comparable to single-pass presentations only
            nv = rule.decide(q.noise.scores, q.noise.positions, q.doc_ids).values
            hit |= (nv != nv[:1]).any(axis=0)[di]
        t.set("noise", hit)
    if q.repaired is not None:
        rep = q.repaired
        if rule.relative:  # any repaired read among the documents whose membership differs between a and b
            moved = v[a] != v[b]
            pair_hit = ((rep[a] | rep[b]) & moved).any(axis=1)
            t.set("parse", pair_hit[pi])
        else:
            t.set("parse", rep[pa, di] | rep[pb, di])
    fit_a = fit_b = np.full(pi.size, np.nan)
    if q.fitted is not None:
        fv = rule.decide(q.fitted, q.real.positions, q.doc_ids).values
        t.set("slot", (fv[pa, di] == v[pa, di]) & (fv[pb, di] == v[pb, di]))
        fit_a, fit_b = q.fitted[pa, di], q.fitted[pb, di]
    if q.within is not None and not bsc:
        wv = rule.decide(q.within.scores, q.within.positions, q.doc_ids).values
        if rule.relative:  # the cut moves with every document: all within-chunk presentations
            t.set("companions", (wv == wv[:1]).all(axis=0)[di])
        elif q.within.slots is not None and q.real.slots is not None:
            # d's own score decides: only the within-chunk presentations that show d where a and b
            # showed it. With the companions fixed, does moving d between those two slots flip it?
            wv, ws = wv[:, di], q.within.slots[:, di]
            at_a, at_b = ws == q.real.slots[pa, di], ws == q.real.slots[pb, di]
            seen = at_a | at_b
            t.set("companions", ~((seen & wv).any(axis=0) & (seen & ~wv).any(axis=0)),
                  at_a.any(axis=0) & at_b.any(axis=0))
    ids = np.asarray(q.doc_ids, dtype=object)
    return {
        "decision": np.full(pi.size, rule.name, dtype=object), "query_id": np.full(pi.size, q.qid, dtype=object),
        "doc_id": ids[di], "presentation_a": q.presentations[pa], "presentation_b": q.presentations[pb],
        "value_a": np.where(v[pa, di], "in", "out").astype(object),
        "value_b": np.where(v[pb, di], "in", "out").astype(object),
        "score_a": q.real.scores[pa, di], "score_b": q.real.scores[pb, di], "margin_a": ma, "margin_b": mb,
        "noise_floor": np.full(pi.size, floor), "fit_a": fit_a, "fit_b": fit_b, **t.columns(),
    }


def _query_rows(rule, q: _Query, bsc: bool, answers: np.ndarray | None = None,
                within_answers: np.ndarray | None = None, name: str | None = None) -> dict[str, np.ndarray] | None:
    """Rows of a per-query rule for one query. With ``answers`` (M,), the flip is the answer's and
    the tests read ``rule``'s value (the reader's input) as the answer's cause."""
    real = rule.decide(q.real.scores, q.real.positions, q.doc_ids)
    inputs, mu = real.values, real.margins
    values = inputs if answers is None else answers
    a, b = np.triu_indices(len(q.presentations), 1)
    flip = values[a] != values[b]
    pa, pb = a[flip], b[flip]
    k = pa.size
    if k == 0:
        return None
    ma, mb = mu[pa], mu[pb]
    t = _Tests(k)
    t.set("tie", (ma == 0) | (mb == 0))
    floor = math.nan
    same_input = inputs[pa] == inputs[pb] if answers is not None else np.zeros(k, dtype=bool)
    if q.noise is not None:
        floor = _floor(q.noise)
        hit = np.minimum(ma, mb) <= rule.kappa * floor
        if not bsc:
            nv = rule.decide(q.noise.scores, q.noise.positions, q.doc_ids).values
            hit |= bool((nv != nv[0]).any())
        t.set("noise", hit | same_input)
    elif same_input.any():  # the same input gave two answers: nothing changed, evaluable without re-reads
        t.set("noise", same_input, same_input)
    if q.repaired is not None:
        rep = q.repaired
        hit = [bool(rep[x, idx].any() or rep[y, idx].any())
               for x, y, idx in ((x, y, np.union1d(real.named[x], real.named[y])) for x, y in zip(pa, pb))]
        t.set("parse", np.array(hit, dtype=bool))
    if q.fitted is not None:
        fv = rule.decide(q.fitted, q.real.positions, q.doc_ids).values
        t.set("slot", (fv[pa] == inputs[pa]) & (fv[pb] == inputs[pb]))
    if answers is not None:
        if within_answers is not None and within_answers.size >= 2 and not bsc:
            t.set("companions", np.full(k, bool((within_answers == within_answers[0]).all())))
    elif q.within is not None and not bsc:
        wv = rule.decide(q.within.scores, q.within.positions, q.doc_ids).values
        t.set("companions", np.full(k, bool((wv == wv[0]).all())))
    nan = np.full(k, np.nan)
    return {
        "decision": np.full(k, name or rule.name, dtype=object), "query_id": np.full(k, q.qid, dtype=object),
        "doc_id": np.full(k, None, dtype=object), "presentation_a": q.presentations[pa],
        "presentation_b": q.presentations[pb], "value_a": values[pa], "value_b": values[pb],
        "score_a": nan, "score_b": nan, "margin_a": ma, "margin_b": mb, "noise_floor": np.full(k, floor),
        "fit_a": nan, "fit_b": nan, **t.columns(),
    }


def _answer_table(answers: pl.DataFrame, perturbation: str) -> dict[str, dict[int, str]]:
    need = {"query_id", "perturbation", "presentation", "answer"}
    if need - set(answers.columns):
        raise InvalidInput(f"answers lack column(s) {sorted(need - set(answers.columns))}")
    out: dict[str, dict[int, str]] = {}
    part = answers.filter(pl.col("perturbation") == perturbation)
    for q, m, ans in part.select("query_id", "presentation", "answer").iter_rows():
        out.setdefault(str(q), {})[int(m)] = normalize_answer(ans or "")
    return out


def _answers_of(q: _Query, table: Mapping[str, Mapping[int, str]]) -> np.ndarray:
    got = table.get(q.qid, {})
    lacking = [int(m) for m in q.presentations if int(m) not in got]
    if lacking:
        raise InvalidInput(f"answers: query {q.qid!r} has no random_shuffle answer for presentation(s) {lacking[:5]}")
    return np.array([got[int(m)] for m in q.presentations], dtype=object)


def flip_ledger(
    scores: pl.DataFrame,
    t_star: float | None,
    task: str,
    *,
    answers: pl.DataFrame | None = None,
    queries: Sequence[str] | None = None,
    bsc_k: int = 1,
    ensembles: int = 4,
    reader_k: int = READER_K,
) -> pl.DataFrame:
    """One row per flipped decision with its first cause and the evidence (``LEDGER_SCHEMA``).

    ``scores``: a scores table (random_shuffle rows; first_stage and batch_noise rows give the
    noise floor, within_chunk rows the companions test, ``slot`` the slot fit, an optional
    Boolean ``repaired`` the parse test). ``t_star``: the frozen threshold, rerank only (None
    otherwise). ``answers``: the reader's answers (qa), for the ``answer`` decision.
    ``queries``: the queries to read (for reranking, the test half of the threshold file).
    ``bsc_k``/``ensembles``: presentations are BSC ensembles when ``bsc_k > 1``.
    """
    if task not in DECISIONS:
        raise InvalidInput(f"unknown task {task!r}; expected one of {sorted(DECISIONS)}")
    if task == "rerank":
        if t_star is None or not math.isfinite(float(t_star)):
            raise InvalidInput("the reranking ledger needs the frozen threshold t* (a finite number)")
    elif t_star is not None:
        raise InvalidInput(f"t_star is the reranking threshold; task {task!r} takes None")
    if answers is not None and task != "qa":
        raise InvalidInput(f"answers are only read for task 'qa', not {task!r}")
    if int(reader_k) < 1:
        raise InvalidInput(f"reader_k must be >= 1, got {reader_k!r}")
    bsc = bsc_k > 1
    chunks: list[dict[str, np.ndarray]] = []
    table = _answer_table(answers, RANDOM_SHUFFLE) if answers is not None else None
    within_table = _answer_table(answers, WITHIN_CHUNK) if answers is not None else None
    for q in _load(scores, queries, bsc_k, ensembles):
        if len(q.presentations) < 2:
            continue
        if task == "rerank":
            if q.presentations[0] != CANONICAL_PRESENTATION:
                raise InvalidInput(f"scores: query {q.qid!r} has no canonical presentation {CANONICAL_PRESENTATION}")
            chunks += [_doc_rows(Retained(float(t_star)), q, bsc), _doc_rows(Matched(float(t_star)), q, bsc)]
        elif task == "qa":
            rule = ReaderInput(int(reader_k))
            chunks.append(_query_rows(rule, q, bsc))
            if table is not None:
                w = within_table.get(q.qid, {})
                within = np.array([w[m] for m in sorted(w)], dtype=object) if w else None
                chunks.append(_query_rows(rule, q, bsc, _answers_of(q, table), within, name="answer"))
        else:
            chunks.extend([_query_rows(Selected(), q, bsc), _query_rows(Pair(), q, bsc)])
    return _frame([c for c in chunks if c is not None])


def _frame(chunks: list[dict[str, np.ndarray]]) -> pl.DataFrame:
    if not chunks:
        return pl.DataFrame(schema=LEDGER_SCHEMA)
    cols = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    data = {}
    for name, dtype in LEDGER_SCHEMA.items():
        if name in TESTED_CAUSES:
            data[name] = pl.Series(name, cols[name], dtype=pl.Boolean)
            data[f"{name}_known"] = pl.Series(f"{name}_known", cols[f"{name}_known"], dtype=pl.Boolean)
        elif dtype == pl.String:
            data[name] = pl.Series(name, cols[name].tolist(), dtype=pl.String)
        else:
            data[name] = pl.Series(name, cols[name]).cast(dtype)
    df = pl.DataFrame(data)
    nulls = [pl.when(pl.col(f"{c}_known")).then(pl.col(c)).otherwise(None).alias(c) for c in TESTED_CAUSES]
    nan_to_null = [pl.col(c).fill_nan(None) for c in ("score_a", "score_b", "noise_floor", "fit_a", "fit_b")]
    return df.with_columns(nulls + nan_to_null).select(list(LEDGER_SCHEMA))


def ledger_shares(ledger: pl.DataFrame, decision: str | None = None) -> dict[str, float]:
    """Counts and shares of one decision's flips by cause (docs/methods/flip-ledger.md#the-ledger-table).

    Keys: ``flips``; per cause ``<cause>_count``, ``<cause>_share`` (count / flips, NaN without
    flips) and ``<cause>_evaluable`` (share of the flips the test could be evaluated on, NaN
    without flips). ``decision`` may be omitted when the ledger holds one decision only. Pool
    several datasets or seeds by concatenating their ledgers (counts add up).
    """
    missing = [c for c in ("decision", "cause", *TESTED_CAUSES) if c not in ledger.columns]
    if missing:
        raise InvalidInput(f"a flip ledger lacks column(s) {missing}")
    if decision is None:
        present = ledger["decision"].unique().to_list()
        if len(present) > 1:
            raise InvalidInput(f"the ledger holds decisions {sorted(present)}; name one (decision=...)")
        rows = ledger
    else:
        rows = ledger.filter(pl.col("decision") == decision)
    k = rows.height
    unknown = set(rows["cause"].unique().to_list()) - set(CAUSES)
    if unknown:
        raise InvalidInput(f"a flip ledger names unknown cause(s) {sorted(unknown)}")
    out: dict[str, float] = {"flips": float(k)}
    for c in CAUSES:
        n = int((rows["cause"] == c).sum())
        out[f"{c}_count"] = float(n)
        out[f"{c}_share"] = n / k if k else math.nan
        known = float(rows[c].is_not_null().mean()) if c in TESTED_CAUSES and k else 1.0
        out[f"{c}_evaluable"] = known if k else math.nan
    return out


__all__ = ["CAUSES", "CAUSE_WORDS", "DECISIONS", "LEDGER_SCHEMA", "REMAINDER_WORDS", "TESTED_CAUSES", "flip_ledger",
           "ledger_shares"]
