"""Generative listwise (RankZephyr-style sliding window): strict parsing, the counted,
order-independent repair, the sliding order, and the whole score -> metrics path with a
tiny random Qwen2 causal LM built offline (it writes garbage, so every window is repaired)."""

from __future__ import annotations

import hashlib
import re

import polars as pl
import pytest
from scorers_tiny import VARIANT, fixture, instability_values, local_model, protocol, score_then_metrics, tiny_causal_lm

from presdep.config.records import PromptSettings, ScoringRun
from presdep.scoring.generative_listwise import GenerativeListwiseScorer, parse_strict, repair, window_messages, windows


def test_parse_is_strict():
    assert parse_strict("[2] > [1] > [3]", 3) == [1, 0, 2]
    assert parse_strict("  [1]>[2]  ", 2) == [0, 1]
    for bad in ("[2] > [1]", "[2] > [1] > [2]", "[1] > [2] > [4]", "Answer: [1] > [2] > [3]",
                "[1] [2] [3]", "[1] > [2] > [3]. Because", "", "1 > 2 > 3"):
        assert parse_strict(bad, 3) is None, bad


def test_repair_keeps_named_ids_then_orders_the_rest_by_content_hash():
    docs = ["apple", "pear", "fig", "kiwi"]
    h = {d: hashlib.sha256(d.encode()).hexdigest() for d in docs}
    rest = sorted(["apple", "fig", "kiwi"], key=h.get)
    # "[2]" named, "[9]" out of range, "[2]" again ignored
    assert [docs[i] for i in repair("[2] > [9] > [2] blah", docs)] == ["pear", *rest]
    assert [docs[i] for i in repair("no ids at all", docs)] == sorted(docs, key=h.get)


def test_windows_slide_from_the_bottom_up():
    assert windows(5, 20, 10) == [(0, 5)]
    assert windows(100, 20, 10) == [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60), (30, 50), (20, 40),
                                    (10, 30), (0, 20)]
    assert windows(7, 3, 2) == [(4, 7), (2, 5), (0, 3)]


def test_window_prompt_lists_every_passage_with_its_identifier():
    msgs = window_messages("what is x", ["first doc", "second doc"])
    assert msgs[0]["role"] == "system" and "RankLLM" in msgs[0]["content"]
    user = msgs[1]["content"]
    assert "I will provide you with 2 passages" in user and "[1] first doc\n[2] second doc\n" in user
    assert user.rstrip().endswith("do not say any word or explain.") and "Search Query: what is x." in user


def _judge_by_number(msgs):
    """Wrapper unit test stub (not a model): ranks a window's passages by the number in their text."""
    out = []
    for m in msgs:
        lines = [l for l in m[1]["content"].splitlines() if l.startswith("[")]
        vals = {int(l.split("]")[0][1:]): int(l.split()[-1]) for l in lines}
        out.append(" > ".join(f"[{i}]" for i in sorted(vals, key=lambda i: -vals[i])))
    return out


def test_sliding_window_wrapper_with_a_stub_judge_hand_worked():
    # 7 passages, window 3, stride 2: windows [4,7), [2,5), [0,3) on the evolving order.
    docs = [f"doc {v}" for v in (5, 1, 7, 3, 9, 2, 8)]
    sc = GenerativeListwiseScorer(_judge_by_number, window=3, stride=2)
    order = sc.rank_prompts([("q", docs)])[0]
    # [4,7) = 9 2 8 -> 9 8 2 : 5 1 7 3 9 8 2 ; [2,5) = 7 3 9 -> 9 7 3 : 5 1 9 7 3 8 2 ;
    # [0,3) = 5 1 9 -> 9 5 1 : 9 5 1 7 3 8 2
    assert [docs[i] for i in order] == [f"doc {v}" for v in (9, 5, 1, 7, 3, 8, 2)]
    assert sc.parse_failures == 0 and sc.windows_read == 3
    s = [r.score for r in sc.score("q", docs)]
    assert s == [6.0, 5.0, 4.0, 3.0, 7.0, 1.0, 2.0]  # 7 - final rank


@pytest.fixture(scope="module")
def garbage_lm(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("gen") / "lm", seed=5)


def _variant(path):
    return {**VARIANT, "scorer": "generative_listwise", "max_new_tokens": 8, "model": local_model(path)}


def test_garbage_replies_are_counted_and_repaired_without_the_presented_order(garbage_lm):
    from presdep.scoring import make_scorer

    sc = make_scorer(ScoringRun.checked(_variant(garbage_lm)), PromptSettings.checked({"max_doc_chars": 200}))
    cand, _ = fixture(1, 6)
    docs = cand["doc"].to_list()
    shown = [docs, docs[::-1], docs[2:] + docs[:2]]
    replies = sc.generate([window_messages("q", d) for d in shown])
    assert all(parse_strict(r, 6) is None for r in replies)
    # no identifier in range: the whole window is ranked by the repair's content order
    assert not [x for r in replies for x in re.findall(r"\[(\d+)\]", r) if 1 <= int(x) <= 6], replies
    orders = sc.rank_prompts([("query", d) for d in shown])
    assert sc.parse_failures == 3 and sc.windows_read == 3
    ranked = [[d[i] for i in o] for d, o in zip(shown, orders)]
    assert ranked[0] == ranked[1] == ranked[2]
    assert ranked[0] == sorted(docs, key=lambda t: hashlib.sha256(t.encode()).hexdigest())


def test_score_to_metrics_reports_the_parse_failure_count(garbage_lm, tmp_path):
    _, metrics = score_then_metrics(tmp_path, _variant(garbage_lm), protocol(B=6, M=2), "rerank",
                                         n_queries=3, n_docs=6)
    # 3 queries x (first stage + 2 shuffles + 2 within-chunk + 3 injections) prompts of one window each
    row = metrics.filter(pl.col("metric") == "parse_failures")
    assert row.height == 1 and row["value"][0] == 3 * (1 + 2 + 2 + 3)
    assert metrics.filter(pl.col("metric") == "parse_failure_share")["value"][0] == 1.0
    # Every window repaired by content: the presented order left no trace.
    inst = instability_values(metrics).filter(pl.col("value").is_not_nan())
    assert inst.height > 0 and inst["value"].abs().max() == 0.0
