"""The hosted teacher against a real loopback HTTP server speaking chat-completions.

The server (127.0.0.1, an ephemeral port, one per test) injects 429s with
Retry-After, 500s, timeouts, truncated JSON and wrong grade counts, keyed by the
prompt text so every fault hits a known prompt on its first attempt(s).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import polars as pl
import pytest

from presdep.schemas import read_metadata, read_table, write_table
from presdep.training.hosted import (
    GradeParseError,
    HostedFailure,
    HostedGrader,
    HostedScorer,
    hosted_settings,
    parse_grades,
)
from presdep.training.silver import silver_labels_files

SECRET = "sk-presdep-test-" + hashlib.sha256(b"not a real key").hexdigest()[:24]


def _docs_in(content: str) -> int:
    return len(re.findall(r"^\[\d+\]", content, re.M))


def good_reply(n: int) -> str:
    return "\n".join(f"[{i}] Grade: {i % 4}" for i in range(1, n + 1))


class FaultServer:
    """``faults`` maps a marker word in the prompt to a list of per-attempt behaviours."""

    def __init__(self, faults: dict[str, list[str]]):
        self.faults = faults
        self.lock = threading.Lock()
        self.requests = 0
        self.attempts: dict[str, int] = {}
        self.auth: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body: bytes, headers=()):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                req = json.loads(raw)
                content = req["messages"][-1]["content"]
                with server.lock:
                    server.requests += 1
                    server.auth.add(self.headers.get("Authorization", ""))
                    key = hashlib.sha256(content.encode()).hexdigest()
                    a = server.attempts.get(key, 0)
                    server.attempts[key] = a + 1
                plan = next((v for m, v in server.faults.items() if m in content), [])
                action = plan[a] if a < len(plan) else plan[-1] if plan and plan[-1].startswith("always") else "ok"
                n = _docs_in(content)
                if action == "429":
                    return self._send(429, b'{"error": {"message": "slow down"}}', [("Retry-After", "0.05")])
                if action in ("500", "always500"):
                    return self._send(500, b'{"error": {"message": "boom"}}')
                if action == "400":
                    return self._send(400, b'{"error": {"message": "bad request"}}')
                if action == "timeout":
                    time.sleep(1.0)
                text = {"wrong_count": good_reply(n - 1), "always_dup": good_reply(n) + "\n[1] Grade: 2",
                        "out_of_range": good_reply(n).replace("[1] Grade: 1", "[1] Grade: 7")}.get(action, good_reply(n))
                body = json.dumps({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": req["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
                }).encode()
                if action == "truncated":
                    body = body[: len(body) // 2]
                return self._send(200, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def spec(url, **kw):
    return {"provider": "openai", "base_url": url, "model": "grader-1", "api_key_env": "PRESDEP_TEST_KEY",
            "concurrency": 3, "max_retries": 3, "parse_retries": 1, "base_delay_s": 0.001, "max_delay_s": 0.2,
            "timeout_s": 0.3, **kw}


FAULTS = {
    "alpha": ["429"], "bravo": ["500", "500"], "charlie": ["timeout"], "delta": ["truncated"],
    "echo": ["wrong_count"], "foxtrot": ["always_dup"], "golf": ["out_of_range", "out_of_range"],
}


def prompts():
    words = list(FAULTS) + ["hotel", "india"]
    return [(f"question about {w}", [f"{w} doc one", f"{w} doc two", f"{w} doc three"]) for w in words]


def test_faults_end_as_labels_or_counted_failures_and_cache_makes_rerun_free(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    slept: list[float] = []
    with FaultServer(FAULTS) as srv:
        g = HostedGrader(spec(srv.url), tmp_path / "cache", sleep=slept.append)
        res = g.grade_many(prompts())
        by_word = {p[0].split()[-1]: r for p, r in zip(prompts(), res)}
        for w in ("alpha", "bravo", "charlie", "delta", "echo", "hotel", "india"):
            assert by_word[w].grades == [1, 2, 3], (w, by_word[w].error)
        assert by_word["foxtrot"].grades is None and "twice" in by_word["foxtrot"].error
        assert by_word["golf"].grades is None and "outside 0..3" in by_word["golf"].error
        st = g.stats.as_dict()
        assert st["failures"] == {"parse": 2} and st["prompts_failed"] == 2 and st["prompts_ok"] == 7
        # 9 first attempts + 429 + 2x500 + timeout + truncated (transport) + echo, foxtrot, golf (parse)
        assert srv.requests == 9 + 5 + 3 and st["requests"] == srv.requests
        assert st["retries"] == 5 and st["parse_errors"] == 5
        assert any(0.05 <= d <= 0.06 for d in slept)  # Retry-After honoured
        assert st["prompt_tokens_paid"] == 100 * (9 + 3)  # only replies that arrived are paid
        assert srv.auth == {f"Bearer {SECRET}"}
        first = srv.requests

        g2 = HostedGrader(spec(srv.url), tmp_path / "cache", sleep=slept.append)
        res2 = g2.grade_many(prompts())
        assert srv.requests == first  # everything came from the cache
        assert [r.grades for r in res2] == [r.grades for r in res]
        assert g2.stats.requests == 0 and g2.stats.failures == {"parse": 2}
    for f in (tmp_path / "cache").rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text()


def test_permanent_errors_are_counted_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    faults = {"alpha": ["always500"], "bravo": ["400"]}
    with FaultServer(faults) as srv:
        g = HostedGrader(spec(srv.url, max_retries=2), tmp_path / "cache", sleep=lambda s: None)
        res = g.grade_many(prompts()[:2] + prompts()[-1:])
        assert res[0].grades is None and "gave up after 3 attempts" in res[0].error
        assert res[1].grades is None and "non-retryable" in res[1].error
        assert res[2].grades == [1, 2, 3]
        assert g.stats.failures == {"transport": 2}
        assert srv.requests == 3 + 1 + 1
        scorer = HostedScorer(spec(srv.url, max_retries=0), tmp_path / "cache2", sleep=lambda s: None)
        with pytest.raises(HostedFailure, match="1 of 1 hosted prompts failed"):
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
        teacher = {"kind": "hosted", "T": 3, **spec(srv.url)}
        kw = dict(candidates_path=cand_path, out_path=out, teacher="gpt", teacher_spec=teacher, dataset="toy",
                  B=2, seed=7, max_doc_chars=200, cache_dir=tmp_path / "out" / "cache")
        df = silver_labels_files(**kw)
        n_requests = srv.requests
        silver_labels_files(**kw)
        assert srv.requests == n_requests  # re-run: zero requests
    silver = read_table(out, "silver")
    assert silver.height == 3 * 5 * 4 and set(silver["presentation"].to_list()) == {0, 1, 2, 3}
    # the prompt holding "foxtrot" duplicates a grade every time: its docs have null scores in that presentation
    assert silver["score"].null_count() > 0
    meta = read_metadata(out)
    assert meta["usage"]["failures"] == {"parse": meta["usage"]["prompts_failed"]} and meta["mock"] is False
    assert meta["usage"]["prompts"] == 3 * 4 * 3
    # label = mean over presentations 1..T of the non-null scores
    chk = (silver.filter(pl.col("presentation") >= 1).group_by("query_id", "doc_id")
           .agg(pl.col("score").drop_nulls().mean().alias("m"), pl.col("label").first()))
    assert chk.filter((pl.col("m") - pl.col("label")).abs() > 1e-12).height == 0
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
    scorer = HostedScorer({"provider": "mock", "model": "grader"}, tmp_path / "cache")
    ro = scorer.score("where was velmora born", ["velmora was born in tarn", "a cello"])
    assert [r.score for r in ro] == [3.0, 0.0] and all(r.probs is None for r in ro)
    d = scorer.describe()
    assert d["model"].startswith("mock:") and d["hosted"]["mock"] is True and "not reported" in d["tau_psi"]
    with pytest.raises(ValueError, match="secret"):
        hosted_settings({"provider": "mock", "api_key": "x"})
    with pytest.raises(RuntimeError, match="PRESDEP_UNSET_KEY"):
        HostedGrader({"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "PRESDEP_UNSET_KEY"}, tmp_path)
