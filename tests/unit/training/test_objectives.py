"""The training objectives against hand computations from METHODS.md (no model: scores are given tensors)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from presdep.contracts.presentations import random_shuffle, stable_seed
from presdep.training.objectives import (
    OCSFT,
    DebiasFirst,
    OrderAveraged,
    PermAug,
    QueryList,
    SingleOrder,
    TrainItem,
    build_queries,
    lambda_at,
    make_objective,
    slot_propensity_weights,
    view_seeds_for,
)


def qlist(qid="q1", k1=(3.0, 1.0, 0.0, 2.0), k10=(2.0, 1.5, 0.5, 1.0)):
    n = len(k1)
    return QueryList(qid, "a query", tuple(f"{qid}-d{i}" for i in range(n)), tuple(f"doc {i}" for i in range(n)),
                     tuple(k1), tuple(k10))


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32, requires_grad=True)


# ----------------------------------------------------------------- labels and loss


def test_labels_k1_for_four_objectives_and_k10_for_order_averaged():
    q = qlist()
    item = TrainItem(0, ((0, 1),))  # first-stage chunk 0 of B = 2: slots show doc 0, doc 1
    s = t(2.0, 1.0)
    # k1 = (3, 1): ((2-3)^2 + (1-1)^2) / 2 slots; k10 = (2, 1.5): (0 + 0.25) / 2
    k1_loss, k10_loss = 0.5, 0.125
    for obj in (SingleOrder(2), PermAug(2, [0]), DebiasFirst(2, [0], [1.0, 1.0])):
        assert obj.loss([q], [item], [[s]], 0)[0].item() == pytest.approx(k1_loss), obj.name
    oc = OCSFT(2, [0, 1], lam=0.0)
    assert oc.loss([q], [TrainItem(0, ((0, 1), (1, 0)))], [[s, t(1.0, 2.0)]], 0)[0].item() == pytest.approx(k1_loss)
    assert OrderAveraged(2).loss([q], [item], [[s]], 0)[0].item() == pytest.approx(k10_loss)
    assert {o.label for o in (SingleOrder(2), PermAug(2, [0]), oc)} == {"k1"} and OrderAveraged(2).label == "k10"


def test_loss_is_keyed_by_document_and_averaged_over_labelled_slots_of_the_batch():
    q1 = qlist("q1", k1=(3.0, None, 1.0, 0.0))
    q2 = qlist("q2", k1=(0.0, 2.0, 1.0, 1.0))
    # item 1: slots show q1 docs 2, 1 (doc 1 unlabelled); item 2: q2 docs 3, 0
    batch = [TrainItem(0, ((2, 1),)), TrainItem(1, ((3, 0),))]
    s1, s2 = t(2.0, 9.0), t(1.5, 0.5)
    loss, parts = PermAug(2, [0]).loss([q1, q2], batch, [[s1], [s2]], 0)
    # labelled slots: q1 doc2 (2 vs 1), q2 doc3 (1.5 vs 1), q2 doc0 (0.5 vs 0): sum 1 + .25 + .25 over 3 slots
    assert loss.item() == pytest.approx(1.5 / 3) and parts["supervised"] == pytest.approx(0.5)
    loss.backward()
    assert s1.grad[1].item() == 0.0  # the unlabelled document gets no gradient


# ----------------------------------------------------------------- views


def test_view_seeds_per_training_seed():
    assert [view_seeds_for(s, 2) for s in (42, 43, 44)] == [[0, 1], [2, 3], [4, 5]]
    assert view_seeds_for(43, 3) == [3, 4, 5] and view_seeds_for(5, 2, base=1) == [8, 9]
    with pytest.raises(ValueError, match="view_seed_base"):
        view_seeds_for(41, 2)


def _chunks_of(order, B):
    return [tuple(order[i : i + B]) for i in range(0, len(order), B)]


def test_perm_aug_reshuffles_the_whole_list_and_rechunks_per_view_seed():
    queries = [qlist("qa", k1=tuple(float(i % 4) for i in range(7))), qlist("qb", k1=(1.0,) * 5)]
    B, seeds = 3, [4, 5]
    for epoch in (0, 1):
        got = PermAug(B, seeds).items(queries, epoch)
        # METHODS: per view seed, each query's whole candidate list shuffled, then cut into prompts of B
        expected = []
        for v in seeds:
            for qi, q in enumerate(queries):
                order = random_shuffle(list(range(len(q))), stable_seed(v, "list_view", epoch, q.query_id))
                expected += [TrainItem(qi, (c,)) for c in _chunks_of(order, B)]
        assert got == expected
    items = PermAug(B, seeds).items(queries, 0)
    # every document once per view seed; chunk membership is not the first-stage one
    for qi, q in enumerate(queries):
        assert sorted(d for it in items if it.query == qi for d in it.views[0]) == sorted(list(range(len(q))) * 2)
    first_stage = {frozenset(c) for q in queries for c in _chunks_of(list(range(len(q))), B)}
    assert any(frozenset(it.views[0]) not in first_stage for it in items)
    # the views come from the view seeds alone; another epoch draws other views
    assert PermAug(B, seeds).items(queries, 0) == items and PermAug(B, [6, 7]).items(queries, 0) != items
    assert PermAug(B, seeds).items(queries, 1) != items
    assert DebiasFirst(B, seeds, [1.0] * B).items(queries, 0) == items


def test_first_stage_objectives_use_first_stage_chunks():
    q = qlist(k1=(1.0,) * 5)
    expected = [TrainItem(0, ((0, 1),)), TrainItem(0, ((2, 3),)), TrainItem(0, ((4,),))]
    assert SingleOrder(2).items([q], 0) == expected == OrderAveraged(2).items([q], 3)


def test_oc_sft_views_are_in_chunk_shuffles_from_the_two_view_seeds():
    q = qlist(k1=(1.0,) * 7)
    items = OCSFT(3, [2, 3], lam=1.0).items([q], 1)
    assert len(items) == 3
    for j, (it, members) in enumerate(zip(items, _chunks_of(list(range(7)), 3))):
        a = random_shuffle(list(members), stable_seed(2, "chunk_view", 1, q.query_id, j))
        b = random_shuffle(list(members), stable_seed(3, "chunk_view", 1, q.query_id, j))
        assert it.views == (tuple(a), tuple(b))
    with pytest.raises(ValueError, match="exactly 2 view seeds"):
        OCSFT(3, [0], lam=1.0)


# ----------------------------------------------------------------- DebiasFirst


def test_slot_propensity_is_the_share_of_all_relevant_documents():
    flags = [[True, True, False], [True, False, False], [False, False, True], [True, False]]
    w = slot_propensity_weights(flags, 3, eps=1e-3)
    # relevant per slot: 3, 1, 1 of 5 relevant documents
    p = np.array([3 / 5, 1 / 5, 1 / 5]) + 1e-3
    np.testing.assert_allclose(w, (1 / p) / (1 / p).mean(), rtol=1e-12)
    assert w.mean() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="more than B"):
        slot_propensity_weights([[True] * 4], 3)
    with pytest.raises(ValueError, match="no relevant document"):
        slot_propensity_weights([[False, False]], 2)


def test_debias_first_weights_each_document_by_its_first_stage_slot():
    q = qlist(k1=(3.0, 1.0, 0.0, 2.0))
    w = [2.0, 0.5]  # B = 2: first-stage slots doc0 -> 0, doc1 -> 1, doc2 -> 0, doc3 -> 1
    item = TrainItem(0, ((3, 0),))  # doc 3 presented at slot 0, doc 0 at slot 1
    s = t(1.0, 2.0)
    loss, _ = DebiasFirst(2, [0, 1], w).loss([q], [item], [[s]], 0)
    # doc3: weight of first-stage slot 1 (0.5) * (1-2)^2; doc0: first-stage slot 0 (2.0) * (2-3)^2
    assert loss.item() == pytest.approx((0.5 * 1.0 + 2.0 * 1.0) / 2)


def test_debias_first_with_all_ones_weights_equals_perm_aug_including_gradients():
    queries = [qlist("q1"), qlist("q2", k1=(0.0, 1.0, None, 3.0))]
    db, pa = DebiasFirst(2, [0, 1], [1.0, 1.0]), PermAug(2, [0, 1])
    items = db.items(queries, 0)
    assert items == pa.items(queries, 0)
    raw = [[0.3 + 0.1 * k, 2.2 - 0.2 * k] for k in range(len(items))]
    res = []
    for obj in (db, pa):
        sc = [[t(*r[: len(it.views[0])])] for r, it in zip(raw, items)]
        loss, _ = obj.loss(queries, items, sc, 5)
        loss.backward()
        res.append((loss.item(), torch.cat([x[0].grad for x in sc])))
    assert res[0][0] == res[1][0] and torch.equal(res[0][1], res[1][1])


# ----------------------------------------------------------------- OC-SFT


def test_oc_sft_supervises_view_a_only_plus_consistency():
    q = qlist(k1=(3.0, 1.0, 0.0, 2.0))
    item = TrainItem(0, ((0, 1), (1, 0)))  # view A: doc0, doc1; view B: doc1, doc0
    sa, sb = t(2.0, 1.0), t(0.0, 1.0)  # view B: doc1 0.0, doc0 1.0
    obj = OCSFT(2, [0, 1], lam=4.0, warmup_steps=10)
    loss, parts = obj.loss([q], [item], [[sa, sb]], step=5)
    sup_a = ((2 - 3) ** 2 + (1 - 1) ** 2) / 2  # view B's errors against the label never enter
    cons = ((2.0 - 1.0) ** 2 + (1.0 - 0.0) ** 2) / 2  # doc0: 2 vs 1, doc1: 1 vs 0
    assert parts["lambda"] == pytest.approx(2.0) and parts["consistency"] == pytest.approx(cons)
    assert loss.item() == pytest.approx(sup_a + 2.0 * cons)
    assert lambda_at(0, 4.0, 10) == 0.0 and lambda_at(10, 4.0, 10) == 4.0 and lambda_at(50, 4.0, 10) == 4.0
    assert lambda_at(3, 4.0, 0) == 4.0


def test_oc_sft_lambda_zero_equals_single_view_training_on_view_a():
    queries = [qlist("q1"), qlist("q2", k1=(0.0, 2.0, 1.0, None))]
    obj = OCSFT(2, [0, 1], lam=0.0, warmup_steps=0)
    items = obj.items(queries, 0)
    raw_a = [[0.1 + k, 2.9 - k / 2] for k in range(len(items))]
    sa = [t(*r) for r in raw_a]
    sb = [t(1.0, 1.0) for _ in items]
    loss, _ = obj.loss(queries, items, [[a, b] for a, b in zip(sa, sb)], step=7)
    loss.backward()
    # single-view training on view A, written from METHODS: sum over labelled slots / their number
    ref_s = [t(*r) for r in raw_a]
    errs = []
    for it, s in zip(items, ref_s):
        for slot, d in enumerate(it.views[0]):
            y = queries[it.query].label_k1[d]
            if y is not None:
                errs.append((s[slot] - y) ** 2)
    ref = torch.stack(errs).sum() / len(errs)
    ref.backward()
    assert loss.item() == ref.item()
    assert all(torch.equal(a.grad, r.grad) for a, r in zip(sa, ref_s))
    assert all(b.grad is None for b in sb)


# ----------------------------------------------------------------- construction


def test_build_queries_orders_by_first_stage_rank_and_keys_labels():
    rows = [{"query_id": "q", "query": "x", "doc_id": f"d{r}", "doc": f"t{r}", "first_stage_rank": r} for r in (3, 1, 2)]
    qs = build_queries(rows, {("q", "d1"): 1.0, ("q", "d3"): 3.0}, {("q", "d2"): 0.5})
    assert qs[0].doc_ids == ("d1", "d2", "d3") and qs[0].label_k1 == (1.0, None, 3.0)
    assert qs[0].label_k10 == (None, 0.5, None)
    with pytest.raises(ValueError, match="twice"):
        build_queries(rows + [rows[0]], {}, {})


def test_make_objective_and_errors():
    oc = make_objective("oc_sft", B=2, view_seeds=[0, 1], lam=5, lambda_warmup_steps=3)
    assert oc.describe()["lambda"] == 5.0 and oc.describe()["view_seeds"] == [0, 1]
    with pytest.raises(ValueError, match="slot weights"):
        make_objective("debias_first", B=2, view_seeds=[0])
    with pytest.raises(ValueError, match="unknown objective"):
        make_objective("nope", B=2)
    with pytest.raises(ValueError):
        OCSFT(2, [0, 1], lam=-1.0)
    with pytest.raises(ValueError, match="positive finite"):
        DebiasFirst(2, [0], [1.0, 0.0])
    with pytest.raises(ValueError, match="2 positive"):
        DebiasFirst(2, [0], [1.0, 1.0, 1.0])
    assert not math.isnan(OrderAveraged(2).labels(qlist(k10=(1.0, float("nan"), 2.0, 0.0)))[0][1].item())
