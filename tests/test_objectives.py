"""The training objectives against hand computations (no model: scores are given tensors)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from presdep.training.objectives import (
    OCSFT,
    DebiasFirst,
    OrderAveraged,
    PermAug,
    SingleOrder,
    TrainChunk,
    build_chunks,
    lambda_at,
    make_objective,
    slot_propensity_weights,
    view_order,
)


def chunk(qid="q1", cid=0, single=(3.0, 1.0, 0.0), mean=(2.0, 1.5, 0.5)):
    n = len(single)
    return TrainChunk(qid, "a query", cid, tuple(f"{qid}-d{i}" for i in range(n)), tuple(f"doc {i}" for i in range(n)),
                      tuple(single), tuple(mean))


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32, requires_grad=True)


def test_single_order_and_order_averaged_by_hand():
    c = chunk()
    s = t(2.0, 1.0, 0.5)  # first-stage order: slot i = doc i
    loss, _ = SingleOrder().loss([c], [[[0, 1, 2]]], [[s]], 0)
    assert loss.item() == pytest.approx(((2 - 3) ** 2 + 0 + 0.5**2) / 3)
    loss, _ = OrderAveraged().loss([c], [[[0, 1, 2]]], [[s]], 0)
    assert loss.item() == pytest.approx((0 + 0.5**2 + 0) / 3)


def test_views_are_keyed_by_doc_id():
    c = chunk()
    # view: slot 0 shows doc 2, slot 1 doc 0, slot 2 doc 1
    s = t(0.5, 2.0, 1.0)
    loss, _ = PermAug().loss([c], [[[2, 0, 1]]], [[s]], 0)
    # doc2 scored 0.5 vs 0, doc0 2.0 vs 3, doc1 1.0 vs 1
    assert loss.item() == pytest.approx((0.25 + 1.0 + 0.0) / 3)


def test_batch_mean_is_over_labelled_documents_and_missing_labels_are_masked():
    c1 = chunk("q1", single=(3.0, None, 1.0))
    c2 = chunk("q2", single=(0.0, 2.0))
    s1, s2 = t(2.0, 9.0, 1.0), t(1.0, 2.0)
    loss, _ = SingleOrder().loss([c1, c2], [[[0, 1, 2]], [[0, 1]]], [[s1], [s2]], 0)
    assert loss.item() == pytest.approx((1.0 + 0.0 + 1.0 + 0.0) / 4)
    loss.backward()
    assert s1.grad[1].item() == 0.0  # the unlabelled document gets no supervised gradient


def test_debias_first_weights_by_slot_by_hand():
    c = chunk()
    w = [2.0, 0.5, 0.5]
    s = t(0.5, 2.0, 1.0)
    loss, _ = DebiasFirst(w).loss([c], [[[2, 0, 1]]], [[s]], 0)
    # slot 0 (doc2): 2.0 * 0.25; slot 1 (doc0): 0.5 * 1.0; slot 2 (doc1): 0.5 * 0
    assert loss.item() == pytest.approx((0.5 + 0.5 + 0.0) / 3)


def test_debias_first_with_uniform_weights_equals_perm_aug():
    c = chunk()
    views = [[[1, 2, 0]]]
    s = t(0.3, 2.2, 1.7)
    a, _ = DebiasFirst([1.0, 1.0, 1.0]).loss([c], views, [[s]], 5)
    b, _ = PermAug().loss([c], views, [[s]], 5)
    assert a.item() == b.item()
    assert DebiasFirst([1.0] * 3).views(c, 2, 7) == PermAug().views(c, 2, 7)


def test_oc_sft_by_hand_and_lambda_warmup():
    c = chunk()
    va, vb = [0, 1, 2], [2, 1, 0]
    sa, sb = t(2.0, 1.0, 0.0), t(1.0, 1.0, 1.0)  # sb: doc2 1.0, doc1 1.0, doc0 1.0
    obj = OCSFT(lam=4.0, warmup_steps=10)
    loss, parts = obj.loss([c], [[va, vb]], [[sa, sb]], step=5)
    sup_a = (1.0 + 0.0 + 0.0) / 3
    sup_b = (4.0 + 0.0 + 1.0) / 3
    cons = ((2 - 1) ** 2 + 0 + (0 - 1) ** 2) / 3
    assert parts["lambda"] == pytest.approx(2.0)
    assert loss.item() == pytest.approx((sup_a + sup_b) / 2 + 2.0 * cons)
    assert parts["consistency"] == pytest.approx(cons)
    assert lambda_at(0, 4.0, 10) == 0.0 and lambda_at(10, 4.0, 10) == 4.0 and lambda_at(50, 4.0, 10) == 4.0
    assert lambda_at(0, 4.0, 0) == 4.0


def test_oc_sft_lambda_zero_equals_two_view_perm_aug_including_gradients():
    c1, c2 = chunk("q1"), chunk("q2", cid=1)
    oc, pa = OCSFT(0.0), PermAug(n_views=2)
    views = [oc.views(c1, 0, 11), oc.views(c2, 3, 11)]
    assert views == [pa.views(c1, 0, 11), pa.views(c2, 3, 11)]
    raw = [[[0.1, 2.9, 1.4], [1.0, 0.2, 2.2]], [[3.0, 0.0, 1.1], [0.4, 0.6, 0.9]]]
    grads = []
    losses = []
    for obj in (oc, pa):
        sc = [[t(*v) for v in cv] for cv in raw]
        loss, _ = obj.loss([c1, c2], views, sc, step=3)
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([x.grad for cv in sc for x in cv]))
    assert losses[0] == losses[1]
    assert torch.equal(grads[0], grads[1])


def test_views_are_stable_and_depend_on_every_seed_part():
    v = view_order(1, 0, "q", 0, 0, 8)
    assert v == view_order(1, 0, "q", 0, 0, 8) and sorted(v) == list(range(8))
    others = [view_order(2, 0, "q", 0, 0, 8), view_order(1, 1, "q", 0, 0, 8), view_order(1, 0, "r", 0, 0, 8),
              view_order(1, 0, "q", 1, 0, 8), view_order(1, 0, "q", 0, 1, 8)]
    assert all(o != v for o in others)
    # fixed views for the first-stage objectives
    assert SingleOrder().views(chunk(), 4, 1) == [[0, 1, 2]]


def test_slot_propensity_weights_by_hand():
    flags = [[True, False, False], [True, True, False], [False, False]]
    w = slot_propensity_weights(flags, 3, eps=1e-3)
    p = np.array([2 / 3, 1 / 3, 0.0]) + 1e-3
    expected = (1 / p) / (1 / p).mean()
    np.testing.assert_allclose(w, expected)
    assert w.mean() == pytest.approx(1.0)
    assert w[2] > w[1] > w[0]  # the slot with fewest relevant documents weighs most
    with pytest.raises(ValueError):
        slot_propensity_weights([[True] * 4], 3)


def test_build_chunks_cuts_first_stage_order_and_keys_labels():
    rows = [{"query_id": "q", "query": "x", "doc_id": f"d{r}", "doc": f"t{r}", "first_stage_rank": r} for r in (3, 1, 2, 5, 4)]
    single = {("q", f"d{r}"): float(r) for r in range(1, 6)}
    mean = {("q", "d1"): 0.5}
    ch = build_chunks(rows, single, mean, 2)
    assert [c.doc_ids for c in ch] == [("d1", "d2"), ("d3", "d4"), ("d5",)]
    assert ch[1].label_single == (3.0, 4.0) and ch[0].label_mean == (0.5, None)
    assert [c.chunk_id for c in ch] == [0, 1, 2]


def test_make_objective_and_errors():
    assert make_objective({"objective": "oc_sft", "lambda": 5, "lambda_warmup_steps": 3}).describe()["lambda"] == 5.0
    assert make_objective({"objective": "perm_aug", "n_views": 2}).n_views == 2
    with pytest.raises(ValueError, match="slot weights"):
        make_objective({"objective": "debias_first"})
    with pytest.raises(ValueError, match="unknown objective"):
        make_objective({"objective": "nope"})
    with pytest.raises(ValueError):
        OCSFT(-1.0)
    with pytest.raises(ValueError):
        DebiasFirst([1.0, 0.0])
    assert not math.isnan(OrderAveraged().labels(chunk(mean=(1.0, float("nan"), 2.0)))[0][1].item())
