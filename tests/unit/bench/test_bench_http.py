"""The HTTP API on a real uvicorn server (ephemeral loopback port): every route, bad bodies,
unknown ids, an over-size upload (declared and chunked), non-finite numbers, HEAD, the
stability cost and concurrency bounds, and the bearer token."""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from bench_server import UvicornServer
from bench_server import free_port as _free_port
from pydantic import ValidationError

from presdep.bench import core, http_api
from presdep.report.bootstrap import DEFAULT_RESAMPLES

TOKEN = "bench-token-123"
LIMIT = 200_000


class Server(UvicornServer):
    def call(self, method: str, path: str, body=None, token: str | None = None, raw: bytes | None = None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="module")
def server():
    with Server(max_body_bytes=LIMIT) as s:
        yield s


@pytest.fixture(scope="module")
def tasks():
    return core.load_split()


def test_read_routes(server, tasks):
    assert server.call("GET", "/health") == (200, {"status": "ok", "tasks": 300, "version": core.__version__})
    code, body = server.call("GET", "/v1/tasks")
    assert code == 200 and len(body["tasks"]) == 300
    assert body["tasks"][0] == {"id": "arith-01-v1", "family": "arithmetic", "variant": "v1"}
    code, body = server.call("GET", "/v1/tasks?family=sequence&variant=v3")
    assert code == 200 and [t["id"] for t in body["tasks"]] == [f"seq-{i:02d}-v3" for i in range(1, 11)]
    code, task = server.call("GET", "/v1/tasks/rem-02-v4")
    src = next(t for t in tasks if t["id"] == "rem-02-v4")
    assert code == 200 and task["prompt"] == src["prompt"] and "answer" not in task
    code, err = server.call("GET", "/v1/tasks/nope-v1")
    assert code == 404 and "unknown task id 'nope-v1'" in err["detail"]
    code, prov = server.call("GET", "/v1/provenance")
    assert code == 200 and prov["tasks"] == 300 and prov["seed"] == 20250617 and len(prov["sha256"]) == 64
    code, entry = server.call("GET", "/v1/index-entry")
    assert code == 200 and entry["name"] == "presdep-bench" and entry["promptVariants"] == ["v1", "v2", "v3", "v4", "v5"]
    code, api = server.call("GET", "/openapi.json")
    assert code == 200
    for path in ("/health", "/v1/tasks", "/v1/tasks/{task_id}", "/v1/score", "/v1/stability",
                 "/v1/provenance", "/v1/index-entry"):
        assert path in api["paths"], path


def test_score_route(server, tasks):
    t = next(t for t in tasks if t["id"] == "arith-03-v2")
    code, body = server.call("POST", "/v1/score", {"id": t["id"], "answer": f"Answer: ${t['answer']}"})
    assert code == 200 and body["id"] == t["id"] and body["score"] == 1
    code, body = server.call("POST", "/v1/score", {"id": t["id"], "answer": str(int(t["answer"]) + 1)})
    assert code == 200 and body["score"] == 0
    assert server.call("POST", "/v1/score", {"id": "nope-v1", "answer": "1"})[0] == 404
    code, err = server.call("POST", "/v1/score", {"id": t["id"]})  # missing field
    assert code == 422 and any(e["loc"][-1] == "answer" for e in err["detail"])
    code, err = server.call("POST", "/v1/score", {"id": t["id"], "answer": "1", "extra": True})
    assert code == 422 and any(e["loc"][-1] == "extra" for e in err["detail"])
    code, err = server.call("POST", "/v1/score", raw=b"{not json")
    assert code == 422
    code, err = server.call("POST", "/v1/score", {"id": t["id"], "answer": 5})
    assert code == 422


def _mock_report(tasks, seed, run):
    rep = core.run("mock", tasks, seed=seed, run=run)["report"]
    del rep["summary"]  # the upload limit is for scores, not for raw answers
    return rep


def test_stability_route(server, tasks):
    reports = [_mock_report(tasks, 1, 0), _mock_report(tasks, 1, 1), _mock_report(tasks, 2, 0)]
    code, res = server.call("POST", "/v1/stability", {"reports": reports, "seed": 5, "resamples": 300})
    assert code == 200, res
    assert res["sharedItems"] == 60 and res["seed"] == 5 and res["resamples"] == 300
    assert sum(res["probabilityFirst"].values()) == pytest.approx(1.0)
    assert sorted(res["promptSensitivity"]["ranks"]["mock-s1"]) == ["v1", "v2", "v3", "v4", "v5"]
    # Validated bodies: a score out of range, an unknown key, an empty list, a bad resample count.
    bad = json.loads(json.dumps(reports[:1]))
    bad[0]["tasks"][0]["score"] = 1.5
    assert server.call("POST", "/v1/stability", {"reports": bad})[0] == 422
    assert server.call("POST", "/v1/stability", {"reports": reports[:1], "colour": "red"})[0] == 422
    assert server.call("POST", "/v1/stability", {"reports": []})[0] == 422
    assert server.call("POST", "/v1/stability", {"reports": reports[:1], "resamples": 0})[0] == 422
    # Reports that parse but cannot be analysed together: a clear 422 from the analysis.
    dup = [dict(reports[0]), dict(reports[0])]
    code, err = server.call("POST", "/v1/stability", {"reports": dup})
    assert code == 422 and "seed 0 appears in both" in err["detail"]


def _constant_reports(scores: dict[str, float], n: int = 30) -> list[dict]:
    """One report per model, the same score on every task: differences are constant, so separable or not by hand."""
    return [{"model": m, "tasks": [{"id": f"t{i}", "score": s} for i in range(n)]} for m, s in scores.items()]


def test_stability_route_carries_rank_ub_and_tiers(server):
    reports = _constant_reports({"good": 1.0, "also-good": 1.0, "bad": 0.0})
    code, res = server.call("POST", "/v1/stability", {"reports": reports, "seed": 2, "resamples": 200})
    assert code == 200, res
    # By hand: the two 1.0 rows are identical (one tier, nobody above them); 1.0 - 0.0 = 1 on every task.
    assert res["tierLevel"] == 0.95
    assert res["tiers"] == [["also-good", "good"], ["bad"]]
    assert res["rankUB"] == {"also-good": 1, "good": 1, "bad": 3}
    assert res["tier"] == {"also-good": 1, "good": 1, "bad": 2}
    assert res["pairwise"]["good"]["bad"]["significantlyBetter"] is True
    assert res["pairwise"]["good"]["also-good"]["significantlyBetter"] is False
    # One code path: the route answers what the library's analysis of the same reports says.
    from presdep.bench.limits import stability_of_reports

    assert res == json.loads(json.dumps(stability_of_reports(reports, seed=2, resamples=200)))


def test_over_size_upload_is_refused(server):
    big = {"id": "arith-01-v1", "answer": "x" * (LIMIT + 10)}
    code, err = server.call("POST", "/v1/score", big)
    assert code == 413 and str(LIMIT) in err["detail"]


def test_bearer_token_when_enabled():
    with Server(token=TOKEN) as s:
        assert s.call("GET", "/health")[0] == 200  # liveness stays open
        for method, path, body in [("GET", "/v1/tasks", None), ("GET", "/v1/tasks/arith-01-v1", None),
                                   ("POST", "/v1/score", {"id": "arith-01-v1", "answer": "1"}),
                                   ("POST", "/v1/stability", {"reports": []}), ("GET", "/v1/provenance", None),
                                   ("GET", "/v1/index-entry", None), ("GET", "/openapi.json", None)]:
            assert s.call(method, path, body)[0] == 401, path
            assert s.call(method, path, body, token="wrong")[0] == 401, path
        assert s.call("GET", "/v1/tasks", token=TOKEN)[0] == 200
        assert s.call("POST", "/v1/score", {"id": "arith-01-v1", "answer": "1"}, token=TOKEN)[0] == 200


def test_cli_serve_reads_the_token_from_the_environment(tmp_path):
    import os
    import subprocess
    import sys

    port = _free_port()
    env = {**os.environ, "PRESDEP_BENCH_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "presdep.cli", "bench", "serve", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "err.log", "wb"))
    try:
        probe = Server.__new__(Server)
        probe.port = port
        for _ in range(300):
            try:
                if probe.call("GET", "/health")[0] == 200:
                    break
            except urllib.error.URLError:
                time.sleep(0.1)
        else:
            raise AssertionError((tmp_path / "err.log").read_text())
        assert probe.call("GET", "/v1/provenance")[0] == 401
        assert probe.call("GET", "/v1/provenance", token=TOKEN)[0] == 200
        assert "127.0.0.1" in (tmp_path / "err.log").read_text()  # uvicorn says where it listens
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _request(port: int, method: str, path: str, raw: bytes | None = None, headers: dict | None = None):
    """(status, lower-cased headers, body bytes) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=raw, headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def _vm_hwm_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _wait_health(port: int, proc: subprocess.Popen, log) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise AssertionError(f"server did not start: {log.read_text()}")


def _post_chunked(port: int, path: str, parts: list[bytes]) -> bytes:
    """A whole chunked POST; the raw reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" % path.encode())
        for part in parts:
            s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
        s.sendall(b"0\r\n\r\n")
        reply = b""
        while data := s.recv(65536):
            reply += data
    return reply


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc (VmHWM)")
def test_chunked_over_size_upload_is_cut_off_while_streaming(tmp_path):
    limit, mb = 2_000_000, 1 << 20
    port = _free_port()
    log = tmp_path / "err.log"
    # No shell in between: proc.pid is the uvicorn server itself, the process whose memory we read.
    proc = subprocess.Popen([sys.executable, "-m", "presdep.cli", "bench", "serve", str(port),
                             "--max-body-bytes", str(limit), "--max-stability-cost", "1000000",
                             "--max-concurrent-stability", "1"],
                            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    try:
        _wait_health(port, proc, log)
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert b"presdep.cli\0bench\0serve" in f.read()
        before = _vm_hwm_kb(proc.pid)
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % mb + b"x" * mb + b"\r\n"
        sent = 0
        while sent < 300:  # up to 300 MB, until the server answers or closes
            if select.select([s], [], [], 0)[0]:
                break
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                break
            sent += 1
        reply = b""
        try:
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                data = s.recv(65536)
                if not data:
                    break
                reply += data
        except (ConnectionResetError, TimeoutError):
            pass
        s.close()
        after = _vm_hwm_kb(proc.pid)
        assert reply.startswith(b"HTTP/1.1 413"), (sent, reply[:300])
        head, _, body = reply.partition(b"\r\n\r\n")
        assert json.loads(body) == {"detail": f"request body over {limit} bytes"}
        assert sent < 300, "the server read the whole upload"
        growth_mb = (after - before) / 1024
        print(f"VmHWM before {before / 1024:.1f} MB, after {after / 1024:.1f} MB, growth {growth_mb:.1f} MB, "
              f"sent {sent} MB before the 413")
        assert growth_mb < 64, (before, after)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            assert r.status == 200
        # A chunked body under the limit is collected and passed on whole.
        reply = _post_chunked(port, "/v1/score", [b'{"id": "arith-01-v1", ', b" " * mb, b'"answer": "1"}'])
        assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
        assert json.loads(reply.partition(b"\r\n\r\n")[2])["id"] == "arith-01-v1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_declared_over_size_body_is_refused_without_reading_it(server):
    # Content-Length above the limit: 413 at once, and the connection is closed rather than drained.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n{" % (LIMIT * 100))
        reply = b""
        while data := s.recv(65536):
            reply += data
    assert reply.startswith(b"HTTP/1.1 413") and b"connection: close" in reply.lower()
    assert json.loads(reply.partition(b"\r\n\r\n")[2]) == {"detail": f"request body over {LIMIT} bytes"}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_refused_with_422(server, number):
    stab = ('{"reports": [{"model": "m", "tasks": [{"id": "arith-01-v1", "score": %s}]}]}' % number).encode()
    score = ('{"id": "arith-01-v1", "answer": "1", "extra": %s}' % number).encode()
    field = ('{"id": %s, "answer": "1"}' % number).encode()
    for path, raw in [("/v1/stability", stab), ("/v1/score", score), ("/v1/score", field)]:
        code, headers, body = _request(server.port, "POST", path, raw)
        assert code == 422, (path, raw, code, body)
        assert headers["content-type"] == "application/json"
        detail = json.loads(body)["detail"]
        assert "non-finite number" in detail and number in detail and "not allowed" in detail, detail
    # Plain syntax errors stay FastAPI's 422; finite floats still pass.
    assert _request(server.port, "POST", "/v1/score", b'{"id": ')[0] == 422
    assert _request(server.port, "POST", "/v1/score", b"[" * 100_000)[0] == 422  # too deep to parse
    assert _request(server.port, "POST", "/v1/score", b'{"id": "arith-01-v1", "answer": "1"}')[0] == 200


def test_models_refuse_non_finite_numbers_themselves():
    for model in (http_api.ScoreRequest, http_api.ReportTask, http_api.Report, http_api.StabilityRequest):
        assert model.model_config.get("allow_inf_nan") is False, model


def test_stability_cost_is_bounded(tasks):
    reports = [_mock_report(tasks, 1, 0), _mock_report(tasks, 1, 1)]  # 600 task rows
    assert http_api.DEFAULT_MAX_STABILITY_COST >= 50 * 300 * 20000  # the public split at the schema's maxima
    with Server(max_stability_cost=500_000) as s:
        code, err = s.call("POST", "/v1/stability", {"reports": reports, "resamples": 1000})
        assert code == 413, err
        for part in ("600000", "500000", "resamples 1000", "600 task rows", "lower 'resamples'"):
            assert part in err["detail"], (part, err)
        code, err = s.call("POST", "/v1/stability", {"reports": reports})  # null: the default 2000 resamples
        assert code == 413 and str(600 * DEFAULT_RESAMPLES) in err["detail"], err
        code, res = s.call("POST", "/v1/stability", {"reports": reports, "resamples": 800, "seed": 1})
        assert code == 200 and res["resamples"] == 800, res


def test_stability_concurrency_is_bounded(monkeypatch, tasks):
    entered, release = threading.Event(), threading.Event()
    mode = {"fail": False}

    def slow(paths, **kw):
        if mode["fail"]:
            raise ValueError("unusable reports")
        entered.set()
        assert release.wait(30)
        return {"ok": True}

    monkeypatch.setattr(core, "stability", slow)
    body = {"reports": [_mock_report(tasks, 1, 0)], "resamples": 10}
    with Server(max_concurrent_stability=1) as s:
        first: dict = {}
        t = threading.Thread(target=lambda: first.update(r=s.call("POST", "/v1/stability", body)))
        t.start()
        try:
            assert entered.wait(30), "the first request never reached the analysis"
            code, headers, raw = _request(s.port, "POST", "/v1/stability", json.dumps(body).encode())
        finally:
            release.set()
            t.join(30)
        assert code == 429, raw
        assert int(headers["retry-after"]) >= 1
        detail = json.loads(raw)["detail"]
        assert "already running" in detail and "retry after" in detail, detail
        assert first["r"] == (200, {"ok": True})
        # The slot comes back after success and after an error.
        assert s.call("POST", "/v1/stability", body) == (200, {"ok": True})
        mode["fail"] = True
        assert [s.call("POST", "/v1/stability", body)[0] for _ in range(2)] == [422, 422]
        mode["fail"] = False
        assert s.call("POST", "/v1/stability", body) == (200, {"ok": True})


def test_head_where_get_is_allowed(server):
    for path in ("/health", "/v1/tasks", "/v1/tasks/arith-01-v1"):
        g_code, g_headers, g_body = _request(server.port, "GET", path)
        h_code, h_headers, h_body = _request(server.port, "HEAD", path)
        assert (h_code, h_body) == (200, b""), path
        assert h_headers["content-type"] == g_headers["content-type"] == "application/json", path
        assert h_headers["content-length"] == g_headers["content-length"] == str(len(g_body)), path
    # No body bytes on the wire either.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        wire = b""
        while data := s.recv(65536):
            wire += data
    assert wire.startswith(b"HTTP/1.1 200") and wire.endswith(b"\r\n\r\n")
    assert _request(server.port, "HEAD", "/v1/tasks/nope-v1")[0] == 404
    assert _request(server.port, "HEAD", "/v1/score")[0] == 405  # POST only
    assert _request(server.port, "HEAD", "/no/such/path")[0] == 404
    code, api = server.call("GET", "/openapi.json")
    assert code == 200
    assert not [(p, m) for p, ops in api["paths"].items() for m in ops if m == "head"]
    assert sorted(api["paths"]["/health"]) == ["get"]


def test_head_needs_the_token_too():
    with Server(token=TOKEN) as s:
        assert _request(s.port, "HEAD", "/health")[0] == 200
        assert _request(s.port, "HEAD", "/v1/tasks")[0] == 401
        assert _request(s.port, "HEAD", "/v1/tasks", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_report_model_accepts_failed_tasks(server, monkeypatch):
    rep = {"model": "m", "seed": 0, "incomplete": False,
           "tasks": [{"id": "arith-01-v1", "score": None, "failed": True}, {"id": "arith-01-v2", "score": 0.5}]}
    req = http_api.StabilityRequest.model_validate({"reports": [rep]})
    assert req.reports[0].tasks[0].score is None and req.reports[0].tasks[0].failed is True
    assert req.reports[0].incomplete is False
    bad = json.loads(json.dumps(rep))
    bad["tasks"][1]["score"] = 1.5
    with pytest.raises(ValidationError):
        http_api.StabilityRequest.model_validate({"reports": [bad]})
    # Over HTTP the report reaches the analysis with its failed task's "score": null kept.
    seen = []
    monkeypatch.setattr(core, "stability",
                        lambda paths, **kw: seen.extend(json.loads(p.read_text()) for p in paths) or {"ok": 1})
    assert server.call("POST", "/v1/stability", {"reports": [rep], "resamples": 10}) == (200, {"ok": 1})
    assert seen[0]["tasks"][0] == {"id": "arith-01-v1", "score": None, "failed": True}
    assert seen[0]["incomplete"] is False
    code, err = server.call("POST", "/v1/stability", {"reports": [bad]})
    assert code == 422 and any(e["loc"][-1] == "score" for e in err["detail"])
