"""The flip ledger (docs/methods/flip-ledger.md): hand-computed cases, one per cause; scores made
by one mechanism each (ties, read noise, a slot bonus, a companion bonus, a slot-by-content
interaction, repaired reads), each of which must put at least 95% of its flips in its own cause; the identity
scorer, which never flips; and the additive fit against a backfitted one."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl
import pytest

from presdep.contracts.errors import InvalidInput
from presdep.metrics.flip_ledger import CAUSES, DECISIONS, LEDGER_SCHEMA, flip_ledger, ledger_shares
from presdep.metrics.flip_rules import additive_fit

# ---------------------------------------------------------------------------------------------
# A synthetic scores table: every presentation of the protocol, scored by one mechanism.
# ---------------------------------------------------------------------------------------------

# score(query, doc, members of its prompt in slot order, slot, rng) -> score
Mechanism = Callable[[int, int, list[int], int, np.random.Generator], float]


def _ids(n: int) -> list[str]:
    return [f"d{i:03d}" for i in range(n)]  # string order = first-stage order


def _presentations(n: int, b: int, m: int, within: int, rereads: int, rng: np.random.Generator):
    """(perturbation, presentation, presented order) of one query; contiguous prompts of b."""
    first = list(range(n))
    out = [("first_stage", 0, first)]
    out += [("random_shuffle", k, list(rng.permutation(n))) for k in range(m)]
    for k in range(within):  # the first-stage prompts, each shuffled inside
        order = []
        for j in range(0, n, b):
            order += [int(x) for x in rng.permutation(first[j : j + b])]
        out.append(("within_chunk", k, order))
    out += [("batch_noise", r, first) for r in range(rereads)]
    return out


def simulate(mech: Mechanism, *, queries: int = 6, n: int = 40, b: int = 4, m: int = 10, within: int = 20,
             rereads: int = 4, seed: int = 0, repair_rate: float | None = None) -> pl.DataFrame:
    """A scores table: first_stage, M random shuffles, within-chunk shuffles, batch_noise re-reads.
    With ``repair_rate``, each read is flagged ``repaired`` with that probability and the
    mechanism sees the flag through ``rng`` (see ``repaired_reads``)."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {c: [] for c in ("query_id", "doc_id", "perturbation", "presentation", "position",
                                             "prompt", "slot", "score", "repaired")}
    ids = _ids(n)
    for q in range(queries):
        for pert, pres, order in _presentations(n, b, m, within, rereads, rng):
            for j in range(0, n, b):
                members = order[j : j + b]
                for s, d in enumerate(members):
                    rep = bool(repair_rate is not None and rng.random() < repair_rate)
                    rows["query_id"].append(f"q{q}")
                    rows["doc_id"].append(ids[d])
                    rows["perturbation"].append(pert)
                    rows["presentation"].append(pres)
                    rows["position"].append(j + s)
                    rows["prompt"].append(j // b)
                    rows["slot"].append(s)
                    rows["score"].append(float(mech(q, d, members, s, _ReadRng(rng, rep))))
                    rows["repaired"].append(rep)
    df = pl.DataFrame(rows).with_columns(pl.col("presentation", "position", "prompt", "slot").cast(pl.Int32))
    return df if repair_rate is not None else df.drop("repaired")


class _ReadRng:
    """The generator a mechanism draws its read noise from, and whether this read was repaired."""

    def __init__(self, rng: np.random.Generator, repaired: bool):
        self.rng, self.repaired = rng, repaired

    def normal(self, *a, **k):
        return self.rng.normal(*a, **k)

    def uniform(self, *a, **k):
        return self.rng.uniform(*a, **k)


def values(seed: int, queries: int, n: int, low: float, high: float) -> np.ndarray:
    """(queries, n) document values drawn once per mechanism."""
    return np.random.default_rng(seed).uniform(low, high, size=(queries, n))


T_STAR = 0.5
B = 4
N = 40
QUERIES = 6


def reader_answers(scores: pl.DataFrame, k: int = 5) -> pl.DataFrame:
    """A deterministic reader: its answer names the set of its top-k paragraphs by (-score, position)."""
    top = (scores.filter(pl.col("perturbation").is_in(["random_shuffle", "within_chunk"]))
           .sort("query_id", "perturbation", "presentation", pl.col("score"), "position",
                 descending=[False, False, False, True, False])
           .group_by("query_id", "perturbation", "presentation", maintain_order=True)
           .agg(pl.col("doc_id").head(k)))
    return top.with_columns(pl.col("doc_id").list.sort().list.join(" ").alias("answer")).drop("doc_id")


# The mechanisms. Each draws its document values once; T_STAR sits inside their range.
_V_SLOT = values(1, QUERIES, N, 0.0, 1.5)
_V_NOISE = values(2, QUERIES, N, 0.0, 1.0)
_DELTA = 1.0
# Companion values sit 0.4-0.9 delta under t*: only the bonus crosses it, and the fit's
# document effect (under 0.1 delta above the value) cannot.
_V_BONUS = T_STAR - _DELTA * values(3, QUERIES, N, 0.4, 0.9)
# Content: half the documents of a query are of type 0, half of type 1, each scoring delta more
# in the slots of its parity. The slots' means are then equal, so the additive fit's document
# effect, about value + delta / 2, stays clear of t* when the value sits 0.02-0.15 or
# 0.85-0.98 delta under it.
_TYPES = np.stack([np.random.default_rng(60 + q).permutation(np.arange(N) % 2) for q in range(QUERIES)])
_U = values(6, QUERIES, N, 0.02, 0.15)
_V_CONTENT = T_STAR - _DELTA * np.where(values(7, QUERIES, N, 0.0, 1.0) < 0.5, _U, 1.0 - _U)
_V_PARSE = values(4, QUERIES, N, 0.0, 1.0)
_GRADES = np.random.default_rng(5).integers(0, 4, size=(QUERIES, N)).astype(float)


def slot_bonus(q, d, members, s, r):
    return _V_SLOT[q, d] - 0.3 * s


def read_noise(q, d, members, s, r):
    return _V_NOISE[q, d] + r.normal(0.0, 0.1)


def companion_bonus(q, d, members, s, r):
    # the partner d + B is never in d's first-stage prompt, so within-chunk shuffles never pair them
    return _V_BONUS[q, d] + _DELTA * (((d + B) % N) in members)


def content_interaction(q, d, members, s, r):
    # the document's own content (its type) interacts with where it is shown: not additive in
    # the slot, and the same whoever its companions are
    return _V_CONTENT[q, d] + _DELTA * (s % 2 == _TYPES[q, d])


def repaired_reads(q, d, members, s, r):
    return _V_PARSE[q, d] + (r.uniform(-1.0, 1.0) if r.repaired else 0.0)


def pure_ties(q, d, members, s, r):
    return _GRADES[q, d]


def identity(q, d, members, s, r):
    return float(N - d)  # the first-stage order, whatever the presentation


MECHANISMS = {
    "slot": (slot_bonus, {}),
    "noise": (read_noise, {}),
    "companions": (companion_bonus, {}),
    "content": (content_interaction, {}),
    "parse": (repaired_reads, {"repair_rate": 0.03}),
}


def _ledgers(mech, **kw) -> dict[str, pl.DataFrame]:
    scores = simulate(mech, queries=QUERIES, n=N, b=B, **kw)
    return {
        "rerank": flip_ledger(scores, T_STAR, "rerank"),
        "response": flip_ledger(scores, None, "response"),
        "qa": flip_ledger(scores, None, "qa", answers=reader_answers(scores)),
    }


@pytest.mark.parametrize("cause", sorted(MECHANISMS))
def test_each_mechanism_puts_95_percent_of_its_flips_in_its_own_cause(cause):
    mech, kw = MECHANISMS[cause]
    for task, ledger in _ledgers(mech, **kw).items():
        assert set(ledger.columns) == set(LEDGER_SCHEMA) and ledger.schema == LEDGER_SCHEMA
        for decision in ledger["decision"].unique().to_list():
            sh = ledger_shares(ledger, decision)
            assert sh["flips"] >= 50, (task, decision, sh["flips"])  # enough flips for the share to mean something
            assert sh[f"{cause}_share"] >= 0.95, (task, decision, sh)
            assert sh[f"{cause}_evaluable"] > 0
        assert set(ledger["decision"]) == set(DECISIONS[task])  # every decision of the task flipped


def test_pure_ties_flip_only_the_readers_fixed_k_cut_and_all_of_it_is_tie():
    led = _ledgers(pure_ties)
    # A score that never changes keeps its side of t*, a cut at |S_0| falls between two different
    # scores, and a response id does not depend on the presentation: nothing to flip.
    assert led["rerank"].height == 0 and led["response"].height == 0
    for decision in ("reader_input", "answer"):
        sh = ledger_shares(led["qa"], decision)
        assert sh["flips"] >= 50 and sh["tie_share"] == 1.0
    assert (led["qa"]["margin_a"] == 0).any()


def test_the_identity_scorer_has_no_flips():
    for task, ledger in _ledgers(identity).items():
        assert ledger.height == 0, task
        assert ledger.schema == LEDGER_SCHEMA
        sh = ledger_shares(ledger)
        assert sh["flips"] == 0 and all(math.isnan(sh[f"{c}_share"]) for c in CAUSES)


def test_bsc_ensembles_keep_the_slot_cause_and_say_companions_are_not_evaluable():
    scores = simulate(slot_bonus, queries=QUERIES, n=N, b=B, m=8)
    led = flip_ledger(scores, T_STAR, "rerank", bsc_k=2, ensembles=4)
    sh = ledger_shares(led, "retained")
    assert sh["flips"] >= 50 and sh["slot_share"] == 1.0
    assert sh["companions_evaluable"] == 0.0 and led["companions"].null_count() == led.height
    assert sh["noise_evaluable"] == 1.0  # the margin arm still runs on the re-reads' floor (0 here)
    assert set(led["presentation_a"].to_list() + led["presentation_b"].to_list()) <= {0, 1, 2, 3}


def test_without_the_data_a_cause_is_skipped_and_said_so():
    scores = simulate(read_noise, queries=QUERIES, n=N, b=B)
    bare = scores.filter(pl.col("perturbation").is_in(["first_stage", "random_shuffle"]))
    led = flip_ledger(bare, T_STAR, "rerank")
    sh = ledger_shares(led, "retained")
    assert sh["noise_evaluable"] == 0.0 and sh["companions_evaluable"] == 0.0 and sh["parse_evaluable"] == 0.0
    assert sh["slot_evaluable"] == 1.0 and sh["tie_evaluable"] == 1.0 and sh["content_evaluable"] == 1.0
    assert sh["noise_count"] == 0 and sh["content_share"] > 0.9  # noise goes where nothing else explains it


# ---------------------------------------------------------------------------------------------
# Hand-computed cases: one small table per cause, every row worked out on paper.
# ---------------------------------------------------------------------------------------------

def _table(rows, **extra) -> pl.DataFrame:
    """rows: (doc, perturbation, presentation, position, score[, slot]) of query q."""
    cols = {"query_id": [], "doc_id": [], "perturbation": [], "presentation": [], "position": [], "score": []}
    has_slot = len(rows[0]) == 6
    if has_slot:
        cols["slot"] = []
    for r in rows:
        cols["query_id"].append("q")
        for name, v in zip(("doc_id", "perturbation", "presentation", "position", "score", "slot"), r):
            cols[name].append(v)
    df = pl.DataFrame(cols).with_columns(pl.col("presentation", "position").cast(pl.Int32))
    return df.with_columns(**{k: pl.Series(v) for k, v in extra.items()})


def _shuffles(scores: dict[str, list[float]], positions: dict[str, list[int]] | None = None, pert="random_shuffle",
              slots: bool = False):
    """Rows of one query's presentations (one prompt: slot = position when ``slots``)."""
    docs = sorted(scores)
    m = len(scores[docs[0]])
    pos = positions or {d: [i] * m for i, d in enumerate(docs)}
    return [(d, pert, k, pos[d][k], scores[d][k]) + ((pos[d][k],) if slots else ()) for k in range(m) for d in docs]


def _row(led: pl.DataFrame, decision: str, doc: str | None = None, a: int = 0, b: int = 1) -> dict:
    sel = led.filter((pl.col("decision") == decision) & (pl.col("presentation_a") == a)
                     & (pl.col("presentation_b") == b))
    if doc is not None:
        sel = sel.filter(pl.col("doc_id") == doc)
    assert sel.height == 1, sel
    return sel.row(0, named=True)


def test_hand_tie_at_the_threshold_and_at_the_matched_cut():
    # t* = 1: y sits exactly on t* in shuffle 0. The canonical shuffle keeps x, y, so n = 2; in
    # shuffle 1 y and z tie at 0.8 and z, shown earlier, takes the second place.
    rows = _shuffles({"x": [1.5, 1.5], "y": [1.0, 0.8], "z": [0.2, 0.8]}, {"x": [0, 0], "y": [1, 2], "z": [2, 1]})
    led = flip_ledger(_table(rows), 1.0, "rerank")
    assert led.height == 3
    r = _row(led, "retained", "y")
    assert (r["value_a"], r["value_b"], r["margin_a"], r["cause"]) == ("in", "out", 0.0, "tie")
    assert r["margin_b"] == pytest.approx(0.2)
    y, z = _row(led, "matched", "y"), _row(led, "matched", "z")
    assert (y["value_a"], y["value_b"], z["value_a"], z["value_b"]) == ("in", "out", "out", "in")
    assert y["margin_a"] == pytest.approx(0.8) and y["margin_b"] == 0.0  # the worst kept (z, 0.8) - 0.8
    assert z["margin_a"] == pytest.approx(0.8) and z["margin_b"] == 0.0  # 0.8 - the best excluded (y, 0.8)
    assert set(led["cause"]) == {"tie"}
    for c in ("noise", "parse", "slot", "companions"):  # no re-reads, flags, slots or within-chunk rows
        assert led[c].null_count() == 3


def _noise_case() -> list[tuple]:
    # t* = 1. Noise reads (first-stage pass, one re-read): x 1.1 / 0.9 (range 0.2, across t*),
    # y 2.0 / 2.0, z 1.01 / 0.99 (across t*), w 3.0 / 3.0: the floor w = 0.2.
    shuffles = _shuffles({"w": [1.6, 0.4], "x": [1.05, 0.7], "y": [1.3, 0.95], "z": [1.5, 0.5]})
    noise = {"w": [3.0, 3.0], "x": [1.1, 0.9], "y": [2.0, 2.0], "z": [1.01, 0.99]}
    reads = [(d, "first_stage", 0, i, v[0]) for i, (d, v) in enumerate(sorted(noise.items()))]
    reads += [(d, "batch_noise", 0, i, v[1]) for i, (d, v) in enumerate(sorted(noise.items()))]
    return shuffles + reads


def test_hand_noise_by_the_rereads_and_by_the_floor():
    led = flip_ledger(_table(_noise_case()), 1.0, "rerank")
    assert set(led["decision"]) == {"retained"}  # shuffle 0 keeps all four: no matched cut
    causes = dict(zip(led["doc_id"], led["cause"]))
    # x: its re-reads cross t* (and 0.05 <= w); y: margin 0.05 <= w = 0.2; z: its re-reads cross
    # t* though its margins (0.5) exceed w; w: neither.
    assert causes == {"x": "noise", "y": "noise", "z": "noise", "w": "content"}
    assert led["noise_floor"].to_list() == pytest.approx([0.2] * 4)
    assert led["noise"].to_list() == [False, True, True, True]  # docs in id order: w, x, y, z
    sh = ledger_shares(led)
    assert (sh["flips"], sh["noise_count"], sh["noise_share"], sh["content_share"]) == (4, 3, 0.75, 0.25)
    assert sh["noise_evaluable"] == 1.0 and sh["slot_evaluable"] == 0.0 and sh["tie_share"] == 0.0


def test_hand_noise_not_evaluable_without_rereads_and_repaired_rereads_left_out():
    rows = _noise_case()
    without = flip_ledger(_table([r for r in rows if r[1] == "random_shuffle"]), 1.0, "rerank")
    assert set(without["cause"]) == {"content"} and without["noise"].null_count() == 4
    # the re-read of x repaired: left out, so only the first-stage pass is left (one read: not evaluable)
    flags = [r[1] == "batch_noise" and r[0] == "x" for r in rows]
    led = flip_ledger(_table(rows, repaired=flags), 1.0, "rerank")
    assert led["noise"].null_count() == 4 and set(led["cause"]) == {"content"}
    assert led["parse"].to_list() == [False] * 4  # no shuffle read of them was repaired


def test_hand_parse():
    # t* = 1; u keeps the matched cut below the pool size. x's shuffle-0 read was repaired.
    rows = _shuffles({"u": [0.1, 0.1], "x": [1.2, 0.8], "y": [1.2, 0.8], "z": [1.2, 1.1]})
    flags = [r[0] == "x" and r[2] == 0 for r in rows]
    led = flip_ledger(_table(rows, repaired=flags), 1.0, "rerank")
    assert set(led["decision"]) == {"retained"}  # shuffle 1 keeps z, x, y: the same top 3
    assert dict(zip(led["doc_id"], led["cause"])) == {"x": "parse", "y": "content"}
    unknown = flip_ledger(_table(rows, repaired=[None] * len(rows)), 1.0, "rerank")
    assert unknown["parse"].null_count() == 2  # a null flag says nothing: not evaluable


def test_hand_parse_of_the_matched_cut_reads_every_moved_document():
    # n = 2 (x, y in shuffle 0). In shuffle 1 the repaired read of u jumps to 3.0 and pushes y out.
    rows = _shuffles({"u": [0.1, 3.0], "x": [1.5, 1.5], "y": [1.2, 1.2]})
    flags = [r[0] == "u" and r[2] == 1 for r in rows]
    led = flip_ledger(_table(rows, repaired=flags), 1.0, "rerank")
    matched = led.filter(pl.col("decision") == "matched")
    assert dict(zip(matched["doc_id"], matched["cause"])) == {"u": "parse", "y": "parse"}
    assert _row(led, "retained", "u")["cause"] == "parse"


def test_hand_slot_additive_and_not():
    # Two docs swap slots 0 and 1. Additive: x 1.2 @0, 0.8 @1; y 1.3 @0, 0.9 @1 (both +0.4 at slot 0).
    add = [("x", "random_shuffle", 0, 0, 1.2, 0), ("y", "random_shuffle", 0, 1, 0.9, 1),
           ("x", "random_shuffle", 1, 1, 0.8, 1), ("y", "random_shuffle", 1, 0, 1.3, 0)]
    led = flip_ledger(_table(add), 1.0, "rerank")
    # retained: x in -> out, y out -> in; matched (n = 1): the top is x, then y
    assert led.height == 4 and set(led["cause"]) == {"slot"}
    x = _row(led, "retained", "x")
    assert (x["fit_a"], x["fit_b"]) == pytest.approx((1.2, 0.8))
    # Not additive: x +0.4 at slot 0, y -0.4 at slot 0. The 2x2 fit removes the interaction
    # contrast 0.8 / 4 from each cell: fitted x = 1.0 and y = 1.1 in both shuffles, one side of
    # t* = 1.05 each: the fit does not flip, the real scores do.
    inter = [("x", "random_shuffle", 0, 0, 1.2, 0), ("y", "random_shuffle", 0, 1, 1.3, 1),
             ("x", "random_shuffle", 1, 1, 0.8, 1), ("y", "random_shuffle", 1, 0, 0.9, 0)]
    led = flip_ledger(_table(inter), 1.05, "rerank")
    assert set(led["decision"]) == {"retained"}  # shuffle 0 keeps both: no matched cut
    x, y = _row(led, "retained", "x"), _row(led, "retained", "y")
    assert (x["fit_a"], x["fit_b"], y["fit_a"], y["fit_b"]) == pytest.approx((1.0, 1.0, 1.1, 1.1))
    assert (x["slot"], y["slot"], x["cause"], y["cause"]) == (False, False, "content", "content")


def test_hand_companions():
    # t* = 1, one prompt, each doc in the same slot throughout. x and y flip under the random
    # shuffles; with the companions fixed (within-chunk, same slots), x stays in (1.3, 1.4) and y
    # still flips (1.2, 0.7). u keeps the matched cut (n = 2) stable.
    rows = _shuffles({"u": [0.1, 0.1], "x": [1.2, 0.8], "y": [1.2, 0.8]}, slots=True)
    rows += _shuffles({"u": [0.1, 0.1], "x": [1.3, 1.4], "y": [1.2, 0.7]}, pert="within_chunk", slots=True)
    led = flip_ledger(_table(rows), 1.0, "rerank")
    assert set(led["decision"]) == {"retained"}
    assert dict(zip(led["doc_id"], led["cause"])) == {"x": "companions", "y": "content"}
    assert dict(zip(led["doc_id"], led["companions"])) == {"x": True, "y": False}
    # Shown in slot 0 by shuffle 0 and slot 1 by shuffle 1, x never sits in slot 0 within-chunk:
    # the within-chunk shuffles say nothing about its flip (not evaluable, not "companions").
    # y gains in slot 1 what x gains in slot 0 (0.5), so the fitted slot effects are equal and x's
    # fit is 1.05 in both shuffles (no flip).
    pos = {"u": [2, 2], "x": [0, 1], "y": [1, 0]}
    rows = _shuffles({"u": [0.1, 0.1], "x": [1.3, 0.8], "y": [0.7, 0.2]}, pos, slots=True)
    rows += _shuffles({"u": [0.1, 0.1], "x": [1.3, 1.4], "y": [0.5, 0.6]}, {"u": [2, 2], "x": [1, 1], "y": [0, 0]},
                      pert="within_chunk", slots=True)
    led = flip_ledger(_table(rows), 1.0, "rerank")
    assert led.height == 1
    x = _row(led, "retained", "x")
    assert (x["fit_a"], x["fit_b"]) == pytest.approx((1.05, 1.05))
    assert x["companions"] is None and x["slot"] is False and x["cause"] == "content"


def test_hand_response_pick_and_pair_on_a_tie():
    # Shuffle 0: r1 and r2 tie at 2.0 and r1 wins by id; shuffle 1: r2 alone on top.
    rows = _shuffles({"r1": [2.0, 1.0], "r2": [2.0, 2.0], "r3": [0.5, 0.5]})
    led = flip_ledger(_table(rows), None, "response")
    sel, pair = _row(led, "selected"), _row(led, "pair")
    assert (sel["value_a"], sel["value_b"], sel["margin_a"], sel["margin_b"]) == ("r1", "r2", 0.0, 1.0)
    assert (pair["value_a"], pair["value_b"], pair["margin_a"]) == ("r1 > r3", "r2 > r3", 0.0)
    assert pair["margin_b"] == pytest.approx(0.5)  # min(2.0 - 1.0, 1.0 - 0.5)
    assert set(led["cause"]) == {"tie"} and led["doc_id"].null_count() == 2


def test_hand_reader_input_tie_and_an_answer_that_changed_with_nothing_changed():
    # Query q, k = 2: b and c tie at 1.0 behind a; shuffle 1 shows c before b.
    rows = _shuffles({"a": [2.0, 2.0], "b": [1.0, 1.0], "c": [1.0, 1.0]}, {"a": [0, 0], "b": [1, 2], "c": [2, 1]})
    answers = pl.DataFrame({"query_id": ["q", "q"], "perturbation": ["random_shuffle"] * 2,
                            "presentation": [0, 1], "answer": ["The B.", "c"]})
    led = flip_ledger(_table(rows), None, "qa", answers=answers, reader_k=2)
    inp, ans = _row(led, "reader_input"), _row(led, "answer")
    assert (inp["value_a"], inp["value_b"], inp["margin_a"], inp["cause"]) == ("a > b", "a > c", 0.0, "tie")
    assert (ans["value_a"], ans["value_b"], ans["cause"]) == ("b", "c", "tie")  # SQuAD-normalised
    # Distinct scores, the same input in all three shuffles, two answers: noise, with no re-read.
    rows = _shuffles({"a": [3.0] * 3, "b": [2.0] * 3, "c": [1.0] * 3})
    answers = pl.DataFrame({"query_id": ["q"] * 3, "perturbation": ["random_shuffle"] * 3,
                            "presentation": [0, 1, 2], "answer": ["x", "y", "x"]})
    led = flip_ledger(_table(rows), None, "qa", answers=answers, reader_k=2)
    assert led["decision"].to_list() == ["answer", "answer"]  # (0, 1) and (1, 2); the input never changed
    assert led["cause"].to_list() == ["noise", "noise"] and led["noise"].to_list() == [True, True]


def test_queries_restrict_the_ledger_and_bad_inputs_are_refused():
    scores = simulate(slot_bonus, queries=QUERIES, n=N, b=B)
    led = flip_ledger(scores, T_STAR, "rerank", queries=["q1", "q3"])
    assert set(led["query_id"]) == {"q1", "q3"}
    whole = flip_ledger(scores, T_STAR, "rerank")
    assert led.equals(whole.filter(pl.col("query_id").is_in(["q1", "q3"])))
    with pytest.raises(InvalidInput, match="t\\*"):
        flip_ledger(scores, None, "rerank")
    with pytest.raises(InvalidInput, match="t_star"):
        flip_ledger(scores, 0.5, "response")
    with pytest.raises(InvalidInput, match="answers"):
        flip_ledger(scores, T_STAR, "rerank", answers=reader_answers(scores))
    with pytest.raises(InvalidInput, match="decisions"):
        ledger_shares(whole)  # two decisions: say which
    qa = reader_answers(scores).filter(pl.col("presentation") != 3)
    with pytest.raises(InvalidInput, match="presentation"):
        flip_ledger(scores, None, "qa", answers=qa)


def _backfit(scores: np.ndarray, slots: np.ndarray, iters: int = 3000) -> np.ndarray:
    """The additive doc + slot least-squares fit by backfitting (an algorithm independent of lstsq)."""
    mu = scores.mean()
    a, b = np.zeros(scores.shape[1]), np.zeros(slots.max() + 1)
    for _ in range(iters):
        a = (scores - mu - b[slots]).mean(axis=0)
        b = np.array([(scores - mu - a[None, :])[slots == s].mean() for s in range(b.size)])
    return mu + a[None, :] + b[slots]


def test_additive_fit_equals_a_backfitted_one():
    rng = np.random.default_rng(7)
    slots = np.array([rng.permutation(8) % 4 for _ in range(6)])  # 8 docs in two prompts of 4
    scores = rng.normal(size=8)[None, :] - 0.4 * slots + 0.3 * rng.normal(size=(6, 8))
    assert additive_fit(scores, slots) == pytest.approx(_backfit(scores, slots), abs=1e-9)
    exact = rng.normal(size=8)[None, :] + np.array([0.5, 0.1, -0.2, -0.4])[slots]
    assert additive_fit(exact, slots) == pytest.approx(exact, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Brute force: every row of a mixed mechanism recomputed by plain loops from the definitions.
# ---------------------------------------------------------------------------------------------

_MIX_N, _MIX_B = 12, 4
_V_MIX = values(8, 3, _MIX_N, 0.0, 1.0)


def mixed(q, d, members, s, r):
    """A little of everything: slot bonus, companion bonus, read noise, repaired reads."""
    bonus = 0.15 * (((d + _MIX_B) % _MIX_N) in members)
    return _V_MIX[q, d] - 0.1 * s + bonus + r.normal(0.0, 0.02) + (r.uniform(-0.5, 0.5) if r.repaired else 0.0)


def _brute_force(scores: pl.DataFrame, t_star: float, decision: str) -> dict[tuple, tuple[str, tuple]]:
    """{(query, doc or None, a, b): (cause, (tie, noise, parse, slot, companions))}, None = not evaluable."""
    out = {}
    for (q,), part in scores.group_by(["query_id"]):
        def reads(pert):
            p = part.filter(pl.col("perturbation") == pert)
            return {m: {r["doc_id"]: r for r in g.iter_rows(named=True)}
                    for (m,), g in p.group_by(["presentation"])}
        shuf, within = reads("random_shuffle"), reads("within_chunk")
        noise = [reads("first_stage")[0]] + [v for _, v in sorted(reads("batch_noise").items())]
        noise = [n for n in noise if not any(r["repaired"] for r in n.values())]
        evaluable_noise = len(noise) >= 2 and any(r["perturbation"] == "batch_noise" for n in noise for r in n.values())
        docs = sorted(shuf[0])
        pres = sorted(shuf)
        fit = _backfit(np.array([[shuf[m][d]["score"] for d in docs] for m in pres]),
                       np.array([[shuf[m][d]["slot"] for d in docs] for m in pres]))
        fitted = {m: dict(zip(docs, fit[i])) for i, m in enumerate(pres)}
        floor = max(max(n[d]["score"] for n in noise) - min(n[d]["score"] for n in noise) for d in docs) \
            if evaluable_noise else None

        def pick(sc: dict) -> str:  # the top by (-score, id)
            return min(docs, key=lambda d: (-sc[d], d))

        def margin(sc: dict) -> float:  # the top's lead over the runner-up
            top = sorted(sc.values(), reverse=True)
            return top[0] - top[1]

        for ia, a in enumerate(pres):
            for b in pres[ia + 1:]:
                if decision == "retained":
                    for d in docs:
                        sa, sb = shuf[a][d]["score"], shuf[b][d]["score"]
                        if (sa >= t_star) == (sb >= t_star):
                            continue
                        ma, mb = abs(sa - t_star), abs(sb - t_star)
                        tests = [ma == 0 or mb == 0]
                        if evaluable_noise:
                            sides = {n[d]["score"] >= t_star for n in noise}
                            tests.append(len(sides) > 1 or min(ma, mb) <= floor)
                        else:
                            tests.append(None)
                        tests.append(shuf[a][d]["repaired"] or shuf[b][d]["repaired"])
                        tests.append((fitted[a][d] >= t_star) == (sa >= t_star)
                                     and (fitted[b][d] >= t_star) == (sb >= t_star))
                        slots = {shuf[a][d]["slot"], shuf[b][d]["slot"]}
                        seen = [w[d] for w in within.values() if w[d]["slot"] in slots]
                        if {w[d]["slot"] for w in within.values()} >= slots:
                            tests.append(len({r["score"] >= t_star for r in seen}) == 1)
                        else:
                            tests.append(None)
                        out[(q, d, a, b)] = tests
                else:  # selected
                    sa = {d: shuf[a][d]["score"] for d in docs}
                    sb = {d: shuf[b][d]["score"] for d in docs}
                    if pick(sa) == pick(sb):
                        continue
                    ma, mb = margin(sa), margin(sb)
                    tests = [ma == 0 or mb == 0]
                    if evaluable_noise:
                        picks = {pick({d: n[d]["score"] for d in docs}) for n in noise}
                        tests.append(len(picks) > 1 or min(ma, mb) <= 2 * floor)
                    else:
                        tests.append(None)
                    named = {pick(sa), pick(sb)}
                    tests.append(any(shuf[m][d]["repaired"] for m in (a, b) for d in named))
                    tests.append(pick(fitted[a]) == pick(sa) and pick(fitted[b]) == pick(sb))
                    tests.append(len({pick({d: w[d]["score"] for d in docs}) for w in within.values()}) == 1)
                    out[(q, None, a, b)] = tests
    causes = {}
    for key, tests in out.items():
        first = next((c for c, hit in zip(CAUSES, tests) if hit), "content")
        causes[key] = (first, tuple(tests))
    return causes


@pytest.mark.parametrize("task,decision", [("rerank", "retained"), ("response", "selected")])
def test_every_row_equals_a_brute_force_reading_of_the_definitions(task, decision):
    scores = simulate(mixed, queries=3, n=_MIX_N, b=_MIX_B, m=6, within=8, rereads=3, seed=9, repair_rate=0.02)
    t_star = 0.45 if task == "rerank" else None
    led = flip_ledger(scores, t_star, task).filter(pl.col("decision") == decision)
    got = {(r["query_id"], r["doc_id"], r["presentation_a"], r["presentation_b"]):
           (r["cause"], tuple(r[c] for c in CAUSES[:-1])) for r in led.iter_rows(named=True)}
    want = _brute_force(scores, 0.45, decision)
    assert got == want
    causes = {c for c, _ in want.values()}
    assert len(causes) >= 3, causes  # the mixture exercises several causes at once
