"""Position diagnostics against independent computations: scipy's Spearman, a backfitting fit of
the additive doc + slot model, designs whose answer is known by construction, and the identity
scorer through the real scoring and metrics path (flat profile, no slot share)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy.stats import spearmanr
from scorers_tiny import VARIANT, score_then_metrics

from presdep.metrics import position
from presdep.scoring.backends import IdentityScorer


def _shuffles(m: int, n: int, seed: int = 0) -> np.ndarray:
    """slots[m, d]: the slot of document d in shuffle m (a random permutation per shuffle)."""
    rng = np.random.default_rng(seed)
    return np.array([rng.permutation(n) for _ in range(m)])


def test_spearmans_match_scipy():
    rng = np.random.default_rng(1)
    slots = _shuffles(5, 9)
    scores = rng.normal(size=(5, 9)) - 0.3 * slots
    want = np.mean([spearmanr(slots[m], scores[m]).statistic for m in range(5)])
    assert position.slot_score_spearman(scores, slots) == pytest.approx(want, abs=1e-12)
    grades = np.array([0, 1, 3, 2, 0, 0, 1, 2, 3])
    assert position.score_grade_spearman(scores, grades) == pytest.approx(
        spearmanr(scores.mean(axis=0), grades).statistic, abs=1e-12)
    assert math.isnan(position.score_grade_spearman(scores, np.zeros(9)))  # constant grades: undefined


def _backfit(scores: np.ndarray, slots: np.ndarray, iters: int = 5000) -> np.ndarray:
    """The additive doc + slot least-squares fit by backfitting (an algorithm independent of lstsq)."""
    m, n = scores.shape
    a, b = np.zeros(n), np.zeros(slots.max() + 1)
    mu = scores.mean()
    for _ in range(iters):
        a = np.array([(scores[:, d] - mu - b[slots[:, d]]).mean() for d in range(n)])
        for s in range(b.size):
            sel = slots == s
            b[s] = (scores[sel] - mu - np.broadcast_to(a, scores.shape)[sel]).mean()
    return mu + a[None, :] + b[slots]


def test_variance_shares_equal_a_backfitted_additive_model():
    rng = np.random.default_rng(2)
    slots = _shuffles(6, 7, seed=3)
    doc_effect = rng.normal(size=7)
    scores = doc_effect[None, :] - 0.5 * slots + 0.2 * rng.normal(size=(6, 7))
    y = scores.ravel()
    total = ((y - y.mean()) ** 2).sum()
    ss_doc = ((np.broadcast_to(scores.mean(axis=0), scores.shape).ravel() - y.mean()) ** 2).sum()
    ss_model = ((_backfit(scores, slots).ravel() - y.mean()) ** 2).sum()
    doc, slot, resid = position.variance_shares(scores, slots)
    assert doc == pytest.approx(ss_doc / total, abs=1e-9)
    assert slot == pytest.approx((ss_model - ss_doc) / total, abs=1e-6)
    assert doc + slot + resid == pytest.approx(1.0, abs=1e-12)
    assert slot > 0.3  # the designed slot effect is found


def test_known_designs_document_only_and_slot_only():
    n = 6
    latin = np.array([[(d + m) % n for d in range(n)] for m in range(n)])  # every doc once in every slot
    by_doc = np.tile(np.arange(n, dtype=float), (n, 1))  # the score is the document's, wherever shown
    assert position.variance_shares(by_doc, latin) == pytest.approx((1.0, 0.0, 0.0), abs=1e-12)
    by_slot = -latin.astype(float)  # the score is the slot's, whatever sits there
    assert position.variance_shares(by_slot, latin) == pytest.approx((0.0, 1.0, 0.0), abs=1e-9)
    profile = position.slot_profile([(by_slot, latin)])
    assert profile["mean"] == pytest.approx([-s for s in range(n)])
    assert profile["centred_mean"] == pytest.approx([-s + (n - 1) / 2 for s in range(n)])
    flat = position.slot_profile([(by_doc, latin)])
    assert flat["centred_mean"] == [0.0] * n and flat["rows"] == [float(n)] * n


def test_slot_profile_interval_by_hand():
    slots = np.array([[0, 1], [1, 0], [0, 1]])
    scores = np.array([[3.0, 1.0], [2.0, 2.5], [2.0, 1.5]])
    p = position.slot_profile([(scores, slots)])
    at0 = np.array([3.0, 2.5, 2.0])  # slot 0 held doc 0, doc 1, doc 0
    assert p["mean"][0] == pytest.approx(at0.mean())
    assert p["ci95"][0] == pytest.approx(1.959963984540054 * at0.std(ddof=1) / math.sqrt(3))


def test_the_identity_scorer_has_a_flat_profile_and_no_slot_share(tmp_path):
    proto = {"seed": 13, "M": 4, "B": 6, "perturbations": ["random_shuffle"], "max_doc_chars": 200}
    _, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "identity"}, proto, "rerank",
                                    scorer=IdentityScorer())
    agg = {r["metric"]: r["value"] for r in metrics.filter(pl.col("query_id").is_null()).iter_rows(named=True)}
    assert agg["var_share_slot"] == 0.0 and agg["var_share_doc"] == 1.0
    centred = [v for k, v in agg.items() if k.startswith("slot_centred_mean_s")]
    assert len(centred) == 6 and all(abs(v) < 1e-12 for v in centred)
    per_q = metrics.filter((pl.col("metric") == "var_share_slot") & pl.col("query_id").is_not_null())
    assert per_q.height == 4 and (per_q["value"] == 0.0).all()
