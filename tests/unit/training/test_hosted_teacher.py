"""The hosted teacher against a real loopback HTTP server speaking chat-completions.

The server (tests/fault_server.py: 127.0.0.1, an ephemeral port, one per test)
injects 429s with Retry-After, 500s, timeouts, truncated JSON and wrong grade
counts, keyed by the prompt text so every fault hits a known prompt on its first
attempt(s). The failure gate, deadline, scrubbing, coalescing and cache checks are
in tests/test_hosted_faults.py.
"""

from __future__ import annotations

import hashlib
import logging

import polars as pl
import pytest
from fault_server import FaultServer, hosted_spec

from presdep.config.records import Protocol, Teacher
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.training.hosted import (
    GradeParseError,
    HostedConfigError,
    HostedFailure,
    HostedGrader,
    HostedScorer,
    hosted_settings,
    parse_grades,
)
from presdep.training.silver import silver_labels_files

SECRET = "sk-presdep-test-" + hashlib.sha256(b"not a real key").hexdigest()[:24]


def spec(url, **kw):
    return hosted_spec(url, **kw)


FAULTS = {
    "alpha": ["429"], "bravo": ["500", "500"], "charlie": ["timeout"], "delta": ["truncated"],
    "echo": ["wrong_count"], "foxtrot": ["always_dup"], "golf": ["out_of_range", "out_of_range"],
}


def prompts():
    words = list(FAULTS) + ["hotel", "india"]
    return [(f"question about {w}", [f"{w} doc one", f"{w} doc two", f"{w} doc three"]) for w in words]


def test_faults_end_as_labels_or_counted_failures_and_reruns_retry_only_parse_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    slept: list[float] = []
    with FaultServer(FAULTS) as srv:
        g = HostedGrader(spec(srv.url), tmp_path / "cache", sleep=slept.append)
        res = g.grade_many(prompts())
        by_word = {p[0].split()[-1]: r for p, r in zip(prompts(), res)}
        for w in ("alpha", "bravo", "charlie", "delta", "echo", "hotel", "india"):
            assert by_word[w].grades == [1, 2, 3], (w, by_word[w].error)
        assert by_word["foxtrot"].grades is None and "twice" in by_word["foxtrot"].error
        assert by_word["foxtrot"].kind == "parse"
        assert by_word["golf"].grades is None and "outside 0..3" in by_word["golf"].error
        st = g.stats.as_dict()
        assert st["failures"] == {"parse": 2} and st["prompts_failed"] == 2 and st["prompts_ok"] == 7
        # 9 first attempts + 429 + 2x500 + timeout + truncated (transport) + echo, foxtrot, golf (parse)
        assert srv.requests == 9 + 5 + 3 and st["requests"] == srv.requests
        assert st["retries"] == 5 and st["parse_errors"] == 5 and st["parse_retry_requests"] == 3
        assert any(0.05 <= d <= 0.06 for d in slept)  # Retry-After honoured
        assert st["prompt_tokens_paid"] == 100 * (9 + 3)  # only replies that arrived are paid
        assert {e["auth"] for e in srv.log} == {f"Bearer {SECRET}"}
        # a parse retry is a CHANGED request: the retry note is in the text, not the same call again
        echo = [e["content"] for e in srv.log if "echo doc one" in e["content"]]
        assert len(echo) == 2 and "Retry 1" not in echo[0] and "Retry 1" in echo[1]
        first = srv.requests

        # Re-run: labels come from the cache; only the two parse failures are asked again,
        # each with new attempts (golf's server plan is exhausted, so it now answers well).
        g2 = HostedGrader(spec(srv.url), tmp_path / "cache", sleep=slept.append)
        res2 = g2.grade_many(prompts())
        assert srv.requests == first + 2 + 1
        asked = [e["content"] for e in srv.log[first:]]
        assert sorted("foxtrot" in c for c in asked) == [False, True, True]
        assert all("Retry 2" in c or "Retry 3" in c for c in asked)
        got = {p[0].split()[-1]: r.grades for p, r in zip(prompts(), res2)}
        assert got["golf"] == [1, 2, 3] and got["foxtrot"] is None
        assert {w: v for w, v in got.items() if w not in ("golf", "foxtrot")} == {
            p[0].split()[-1]: r.grades for p, r in zip(prompts(), res) if r.grades is not None}
        assert g2.stats.failures == {"parse": 1}
    for f in (tmp_path / "cache").rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text()


def test_permanent_errors_are_counted_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    faults = {"alpha": ["always500"], "bravo": ["400"]}
    with FaultServer(faults) as srv:
        g = HostedGrader(spec(srv.url, max_retries=2), tmp_path / "cache", sleep=lambda s: None)
        res = g.grade_many(prompts()[:2] + prompts()[-1:])
        assert res[0].grades is None and "gave up after 3 attempts, last HTTP 500" in res[0].error
        assert res[1].grades is None and "HTTP 400" in res[1].error and res[1].status == 400
        assert res[2].grades == [1, 2, 3]
        assert g.stats.failures == {"transport": 2} and g.stats.statuses == {"500": 1, "400": 1}
        assert srv.requests == 3 + 1 + 1
        scorer = HostedScorer(spec(srv.url, max_retries=0), tmp_path / "cache2", sleep=lambda s: None)
        with pytest.raises(HostedFailure, match="1 of 1 prompts failed"):
            scorer.score_prompts(prompts()[:1])


def _candidates(n_q=3, n_d=5):
    rows = [{"query_id": f"q{q}", "query": f"question {q} about hotel", "doc_id": f"q{q}-d{d}",
             "doc": f"text {d} of hotel {q}" + (" foxtrot" if (q, d) == (2, 0) else ""),
             "first_stage_rank": d + 1, "first_stage_score": float(-d)} for q in range(n_q) for d in range(n_d)]
    return pl.DataFrame(rows).with_columns(pl.col("first_stage_rank").cast(pl.Int32))


def test_silver_from_hosted_teacher_end_to_end_without_leaking_the_key(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    cand_path = tmp_path / "candidates.parquet"
    write_table(_candidates(), cand_path, "candidates")
    out = tmp_path / "out" / "silver.parquet"
    caplog.set_level(logging.DEBUG)
    with FaultServer({"alpha": ["429"], "foxtrot": ["always_dup"]}) as srv:
        # 3 of the 27 prompts hold "foxtrot" and never parse: allowed here (0.2), counted in the metadata
        teacher = {"kind": "hosted", "T": 3, **spec(srv.url, max_parse_failure_share=0.2)}
        kw = dict(candidates_path=cand_path, out_path=out, teacher=Teacher.checked("gpt", teacher), dataset="toy",
                  protocol=Protocol.checked({"seed": 7, "M": 1, "B": 2, "max_doc_chars": 200, "perturbations": []}),
                  cache_dir=tmp_path / "out" / "cache")
        df = silver_labels_files(**kw)
        n_requests = srv.requests
        silver_labels_files(**kw)
        # re-run: only the 3 failed prompts are asked again, parse_retries + 1 = 2 new attempts each
        assert srv.requests == n_requests + 3 * 2
        assert all("foxtrot" in e["content"] for e in srv.log[n_requests:])
    silver = read_table(out, "silver")
    assert silver.height == 3 * 5 * 3 and set(silver["presentation"].to_list()) == {0, 1, 2}
    # the prompt holding "foxtrot" duplicates a grade every time: its docs have null scores in that presentation
    assert silver["score"].null_count() == 3 * 2
    meta = read_metadata(out)
    assert meta["usage"]["failures"] == {"parse": 3} and meta["parse_failures"] == 3 and meta["mock"] is False
    assert meta["usage"]["prompts"] == 3 * 3 * 3 and meta["transport_failures"] == 0
    # label = mean over shuffles 0..T-1 of the non-null scores; label_k1 = the score under shuffle 0
    chk = (silver.group_by("query_id", "doc_id")
           .agg(pl.col("score").drop_nulls().mean().alias("m"), pl.col("label").first(),
                pl.col("score").sort_by("presentation").first().alias("s0"), pl.col("label_k1").first()))
    assert chk.filter((pl.col("m") - pl.col("label")).abs() > 1e-12).height == 0
    assert chk.filter(pl.col("s0").is_null() != pl.col("label_k1").is_null()).height == 0
    assert chk.filter((pl.col("s0") - pl.col("label_k1")).abs() > 1e-12).height == 0
    assert df.equals(silver)
    for f in (tmp_path / "out").rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    assert SECRET not in caplog.text


def test_parse_grades_is_strict():
    assert parse_grades("[1] Grade: 3\n\n[2] Grade: 0\n", 2) == [3, 0]
    assert parse_grades("[2] Grade: 1\n[1] Grade: 2", 2) == [2, 1]  # keyed by index, not line order
    bad = ["[1] Grade: 3", "[1] Grade: 3\n[2] Grade: 1\n[3] Grade: 0", "[1] Grade: 3\n[1] Grade: 1",
           "[1] Grade: 4\n[2] Grade: 1", "[1] Grade: -1\n[2] Grade: 1", "Sure!\n[1] Grade: 1\n[2] Grade: 1",
           "[1] Grade: 1.5\n[2] Grade: 1", ""]
    for text in bad:
        with pytest.raises(GradeParseError):
            parse_grades(text, 2)
    with pytest.raises(GradeParseError):
        parse_grades(None, 1)


def test_mock_provider_needs_no_key_and_is_labelled(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    scorer = HostedScorer(spec(None, provider="mock", model="grader"), tmp_path / "cache")
    ro = scorer.score("where was velmora born", ["velmora was born in tarn", "a cello"])
    assert [r.score for r in ro] == [3.0, 0.0] and all(r.probs is None for r in ro)
    d = scorer.describe()
    assert d["model"].startswith("mock:") and d["hosted"]["mock"] is True and "not reported" in d["tau_psi"]
    with pytest.raises(ValueError, match="secret"):
        hosted_settings({**spec(None, provider="mock"), "api_key": "x"})
    with pytest.raises(ValueError, match="lack .*timeout_s"):
        hosted_settings({"provider": "mock", "model": "m"})
    with pytest.raises(ValueError, match="unknown key.*timeout"):
        hosted_settings({**spec(None, provider="mock"), "timeout": 3})
    # the key is read only when a request must be sent, and its absence is then an error naming the variable
    g = HostedGrader(spec("http://127.0.0.1:9/v1", api_key_env="PRESDEP_UNSET_KEY"), tmp_path / "c2")
    with pytest.raises(HostedConfigError, match="PRESDEP_UNSET_KEY"):
        g.grade("q", ["d"])
