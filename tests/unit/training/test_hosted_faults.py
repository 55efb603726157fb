"""The hosted teacher's failure handling against the loopback fault server (tests/fault_server.py).

Each case of the silent failures once observed has a test here: a failed teacher
fails the job (no file), parse failures are retried on a re-run with a changed
request, a total request deadline, secrets scrubbed, one request per distinct
prompt in flight, a normalised and verified cache, the Retry-After ceiling, and a
fully cached run without a key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time

import polars as pl
import pytest
from fault_server import FaultServer, hosted_spec

from presdep.config.records import Protocol, Teacher
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.training.hosted import HostedFailure, HostedGrader, HostedScorer, failure_gate
from presdep.training.hosted_net import normalise_endpoint, register_secret, scrub
from presdep.training.silver import silver_labels_files

SECRET = "sk-presdep-test-" + hashlib.sha256(b"still not a real key").hexdigest()[:24]


def _prompts(words):
    return [(f"question about {w}", [f"{w} doc one", f"{w} doc two", f"{w} doc three"]) for w in words]


def _candidates(n_q=3, n_d=5, marker=None):
    rows = [{"query_id": f"q{q}", "query": f"question {q} about hotel", "doc_id": f"q{q}-d{d}",
             "doc": f"text {d} of hotel {q}" + (f" {marker}" if marker and (q, d) == (2, 0) else ""),
             "first_stage_rank": d + 1, "first_stage_score": float(-d)} for q in range(n_q) for d in range(n_d)]
    return pl.DataFrame(rows).with_columns(pl.col("first_stage_rank").cast(pl.Int32))


def _silver_kw(tmp_path, url, marker=None, **settings):
    cand = tmp_path / "candidates.parquet"
    if not cand.exists():
        write_table(_candidates(marker=marker), cand, "candidates")
    return dict(candidates_path=cand, out_path=tmp_path / "silver" / "gpt" / "toy.parquet",
                teacher=Teacher.checked("gpt", {"kind": "hosted", "T": 3, **hosted_spec(url, **settings)}), dataset="toy",
                protocol=Protocol.checked({"seed": 7, "M": 1, "B": 2, "max_doc_chars": 200, "perturbations": []}),
                cache_dir=tmp_path / "cache")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ----------------------------------------------------------------- the failure gate


def test_bad_key_fails_the_job_with_the_status_writes_nothing_and_a_corrected_key_runs(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with FaultServer(require_key=SECRET) as srv:
        monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET + "-wrong")
        kw = _silver_kw(tmp_path, srv.url)
        with pytest.raises(HostedFailure) as err:
            silver_labels_files(**kw)
        msg = str(err.value)
        assert "HTTP 401" in msg and "27 of 27 prompts ended without a label" in msg, msg
        assert "27 transport/authentication failure(s)" in msg
        assert not kw["out_path"].exists()
        # 401 concerns the endpoint: after the first refusals nothing more is sent (3 threads in flight at most)
        assert 1 <= srv.requests <= 3
        # the server echoed the wrong key back in its 401 body: it is in no message or log line
        assert "-wrong" not in msg and SECRET not in msg and SECRET not in caplog.text
        assert "[REDACTED]" in caplog.text or "[REDACTED]" in msg

        monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
        df = silver_labels_files(**kw)
        assert kw["out_path"].exists() and df["score"].null_count() == 0
        assert read_metadata(kw["out_path"])["usage"]["prompts_failed"] == 0


@pytest.mark.parametrize("behaviour, status", [
    ("always401", "HTTP 401"), ("always403", "HTTP 403"), ("always404", "HTTP 404"), ("always400", "HTTP 400"),
    ("always422", "HTTP 422"), ("always429", "HTTP 429"), ("always503", "HTTP 503"),
])
def test_permanent_failures_of_every_kind_fail_the_job(tmp_path, monkeypatch, behaviour, status):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    with FaultServer({"hotel": [behaviour]}) as srv:
        kw = _silver_kw(tmp_path, srv.url, max_retries=1)
        with pytest.raises(HostedFailure, match=status) as err:
            silver_labels_files(**kw)
        assert "27 of 27 prompts ended without a label" in str(err.value)
        assert not kw["out_path"].exists()


def test_unreachable_host_fails_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    kw = _silver_kw(tmp_path, f"http://127.0.0.1:{_free_port()}/v1", max_retries=1)
    with pytest.raises(HostedFailure, match="27 of 27 prompts ended without a label") as err:
        silver_labels_files(**kw)
    assert "APIConnectionError" in str(err.value) and "no HTTP status" in str(err.value)
    assert not kw["out_path"].exists()


def test_failure_gate_counts_against_the_configured_shares():
    # an independent reading of the rule: fail iff count > share * prompts
    def stats(transport, parse, total=100):
        return {"prompts": total, "failures": {"transport": transport, "parse": parse}, "statuses": {},
                "first_error": "x"}

    settings = {"max_transport_failure_share": 0.0, "max_parse_failure_share": 0.02}
    failure_gate(stats(0, 2), settings, "t")  # 2 <= 0.02 * 100
    with pytest.raises(HostedFailure, match="3 unreadable"):
        failure_gate(stats(0, 3), settings, "t")
    with pytest.raises(HostedFailure, match="1 transport"):
        failure_gate(stats(1, 0), settings, "t")
    failure_gate(stats(5, 0), {**settings, "max_transport_failure_share": 0.05}, "t")


def test_parse_failure_share_gate_in_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    with FaultServer({"foxtrot": ["always_dup"]}) as srv:
        # 3 of 27 prompts hold the marker and never parse: 3 > 0.02 * 27 fails the job ...
        kw = _silver_kw(tmp_path, srv.url, marker="foxtrot", parse_retries=0)
        with pytest.raises(HostedFailure, match="3 unreadable") as err:
            silver_labels_files(**kw)
        assert "3 of 27 prompts ended without a label" in str(err.value)
        assert not kw["out_path"].exists()
        # ... 3 <= 0.12 * 27 passes, and the failures are counted in the metadata
        kw = _silver_kw(tmp_path, srv.url, marker="foxtrot", parse_retries=0, max_parse_failure_share=0.12)
        silver_labels_files(**kw)
    meta = read_metadata(kw["out_path"])
    assert meta["parse_failures"] == 3 and meta["usage"]["failures"] == {"parse": 3}
    assert read_table(kw["out_path"], "silver")["score"].null_count() == 3 * 2


def test_hosted_scorer_raises_on_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    with FaultServer(require_key="another key") as srv:
        scorer = HostedScorer(hosted_spec(srv.url), tmp_path / "cache", sleep=lambda s: None)
        with pytest.raises(HostedFailure, match=r"2 of 2 prompts failed \(2 transport.*401") as err:
            scorer.score_prompts(_prompts(["alpha", "bravo"]))
        assert SECRET not in str(err.value)


# ----------------------------------------------------------------- parse retries


def test_parse_failures_are_retried_on_a_rerun_with_a_changed_request(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    with FaultServer({"echo": ["bad_unless_retried"]}) as srv:
        g = HostedGrader(hosted_spec(srv.url, parse_retries=0), tmp_path / "cache")
        (r,) = g.grade_many(_prompts(["echo"]))
        assert r.grades is None and r.kind == "parse" and srv.requests == 1
        # the identical call again would get the identical reply: the re-run changes the request
        g2 = HostedGrader(hosted_spec(srv.url, parse_retries=0), tmp_path / "cache")
        (r2,) = g2.grade_many(_prompts(["echo"]))
        assert r2.grades == [1, 2, 3] and srv.requests == 2
        first, second = srv.log[0]["content"], srv.log[1]["content"]
        assert first != second and second.startswith(first) and "Retry 1" in second
        # a third run pays nothing
        g3 = HostedGrader(hosted_spec(srv.url, parse_retries=0), tmp_path / "cache")
        assert g3.grade_many(_prompts(["echo"]))[0].grades == [1, 2, 3] and srv.requests == 2


# ----------------------------------------------------------------- deadline


def test_timeout_is_a_total_deadline_against_a_trickling_server(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    # 400 whitespace bytes, one every 50 ms: 20 s if the client waited per read
    with FaultServer({"trickle": ["trickle"]}, trickle_every_s=0.05, trickle_bytes=400) as srv:
        g = HostedGrader(hosted_spec(srv.url, timeout_s=0.5, max_retries=0), tmp_path / "cache")
        (r,) = g.grade_many(_prompts(["trickle"]))
        assert r.grades is None and r.kind == "transport" and "APITimeoutError" in r.error
        for _ in range(100):  # the handler notices the client has gone at its next write
            if srv.trickled:
                break
            time.sleep(0.05)
        assert srv.trickled and srv.trickled[0] < 400


# ----------------------------------------------------------------- secrets


def test_scrub_removes_keys_and_echoed_credentials():
    register_secret("sk-abcdef0123456789")
    text = ('401 {"error": {"received_headers": {"Authorization": "Bearer sk-other-key-42"}}} '
            "Authorization: Bearer tok_9 'authorization': 'Basic dXNlcjpwYXNz' x-api-key=abc123 "
            "the key sk-abcdef0123456789 again, https://user:pw@host/v1, bearer zzzzzzzz")
    out = scrub(text)
    for leaked in ("sk-other-key-42", "tok_9", "dXNlcjpwYXNz", "abc123", "sk-abcdef0123456789", "user:pw", "zzzzzzzz"):
        assert leaked not in out, (leaked, out)
    assert out.count("[REDACTED]") >= 7 and out.startswith("401 ")
    assert scrub(scrub(out)) == scrub(out) and "]]" not in scrub(out).replace("}}}", "")


def test_a_server_echoing_the_key_leaves_it_in_no_log_output_or_exception(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    # every error body echoes the Authorization header; one prompt fails for good (allowed by the share)
    with FaultServer({"question 1": ["500", "429"], "foxtrot": ["always400"]}, echo_auth=True) as srv:
        kw = _silver_kw(tmp_path, srv.url, marker="foxtrot", max_transport_failure_share=0.12)
        silver_labels_files(**kw)
        with pytest.raises(HostedFailure) as err:
            strict = Teacher.checked("gpt", {**kw["teacher"].as_dict(), "max_transport_failure_share": 0.0})
            silver_labels_files(**{**kw, "teacher": strict, "out_path": tmp_path / "other.parquet"})
    assert "HTTP 400" in str(err.value) and SECRET not in str(err.value) and SECRET not in repr(err.value)
    assert SECRET not in caplog.text
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


# ----------------------------------------------------------------- in flight, cache


def test_one_request_per_distinct_prompt_with_two_threads_and_a_slow_server(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    words = ["alpha", "bravo", "charlie", "delta"]
    with FaultServer({w: ["slow"] for w in words + ["echo"]}, slow_s=0.3) as srv:
        g = HostedGrader(hosted_spec(srv.url, concurrency=2), tmp_path / "cache")
        res = g.grade_many([p for p in _prompts(words) for _ in range(3)])  # each distinct prompt three times in a row
        assert srv.requests == 4 and all(r.grades == [1, 2, 3] for r in res)
        assert len({e["content"] for e in srv.log}) == 4
        # every other ask either waited for the one in flight or found its reply cached
        assert g.stats.shared_in_flight + g.stats.cache_hits == 12 - 4
        # two threads asking the same uncached prompt at the same moment: one request
        gate = threading.Barrier(2)
        out = []

        def ask():
            gate.wait()
            out.append(g.grade(*_prompts(["echo"])[0]))

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert srv.requests == 5 and [r.grades for r in out] == [[1, 2, 3]] * 2


def test_normalise_endpoint():
    assert normalise_endpoint("HTTP://LocalHost:8000/v1/") == "http://127.0.0.1:8000/v1"
    assert normalise_endpoint("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert normalise_endpoint("https://api.Example.com:443/v1//") == "https://api.example.com/v1"
    assert normalise_endpoint("https://u:p@api.example.com/v1") == "https://api.example.com/v1"
    assert normalise_endpoint("http://127.0.0.1:8000/v2") != normalise_endpoint("http://127.0.0.1:8000/v1")


def test_cosmetic_base_url_changes_reuse_the_cache_and_a_cached_run_needs_no_key(tmp_path, monkeypatch):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    with FaultServer() as srv:
        first = HostedGrader(hosted_spec(srv.url), tmp_path / "cache").grade_many(_prompts(["alpha", "bravo"]))
        assert srv.requests == 2
        monkeypatch.delenv("PRESDEP_TEST_KEY")
        for url in (srv.url + "/", f"http://LOCALHOST:{srv.port}/v1", f"http://localhost:{srv.port}/v1/"):
            g = HostedGrader(hosted_spec(url), tmp_path / "cache")
            assert [r.grades for r in g.grade_many(_prompts(["alpha", "bravo"]))] == [r.grades for r in first]
            assert g.stats.requests == 0 and g.stats.cache_hits == 2
        assert srv.requests == 2
        # the silver job too: a fully cached job runs with no key in the environment
        monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
        kw = _silver_kw(tmp_path / "job", srv.url)
        silver_labels_files(**kw)
        paid = srv.requests
        monkeypatch.delenv("PRESDEP_TEST_KEY")
        kw["out_path"].unlink()
        silver_labels_files(**kw)
        assert kw["out_path"].exists() and srv.requests == paid


def test_corrupt_swapped_or_misshapen_cache_entries_are_named_set_aside_and_reasked(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    words = ["alpha", "bravo", "charlie", "delta", "echo"]
    with FaultServer() as srv:
        HostedGrader(hosted_spec(srv.url), tmp_path / "cache").grade_many(_prompts(words))
        assert srv.requests == 5
        files = {}
        for f in (tmp_path / "cache").rglob("*.json"):
            content = json.loads(f.read_text())["request"]["body"]["messages"][-1]["content"]
            files[next(w for w in words if f"about {w}" in content)] = f
        files["alpha"].write_bytes(b"\xff\xfe not utf-8 \x80")
        files["bravo"].write_text("[1, 2, 3]")
        files["charlie"].write_text('{"content": "[1] Grade: 3", "prompt_tokens": 1')  # torn
        swapped = files["echo"].read_text()
        files["echo"].write_text(files["delta"].read_text())  # delta's reply under echo's name
        files["delta"].write_text(swapped)
        caplog.set_level(logging.WARNING)
        g = HostedGrader(hosted_spec(srv.url), tmp_path / "cache")
        res = g.grade_many(_prompts(words))
        assert [r.grades for r in res] == [[1, 2, 3]] * 5
        assert srv.requests == 5 + 5 and g.stats.cache_set_aside == 5
    for w, f in files.items():
        assert f.with_name(f.name + ".bad").exists(), w  # kept, renamed aside
        assert str(f) in caplog.text  # the warning names the file
    assert "not UTF-8" in caplog.text and "answers another request" in caplog.text


# ----------------------------------------------------------------- Retry-After


def test_retry_after_is_honoured_up_to_its_ceiling_and_the_ceiling_is_reported(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PRESDEP_TEST_KEY", SECRET)
    caplog.set_level(logging.WARNING)
    slept: list[float] = []
    with FaultServer({"alpha": ["429:0.05"], "bravo": ["429:30"]}) as srv:
        # max_delay_s (the backoff cap) is smaller than both Retry-After values: it must not cut them
        g = HostedGrader(hosted_spec(srv.url, max_delay_s=0.01, max_retry_after_s=0.2, base_delay_s=0.001),
                         tmp_path / "cache", sleep=slept.append)
        res = g.grade_many(_prompts(["alpha", "bravo"]))
    assert [r.grades for r in res] == [[1, 2, 3]] * 2
    assert sorted(round(s, 2) for s in slept) == [0.05, 0.2]
    assert g.stats.retry_after_capped == 1
    assert "Retry-After" in caplog.text and "30.0 s" in caplog.text and "max_retry_after_s" in caplog.text
