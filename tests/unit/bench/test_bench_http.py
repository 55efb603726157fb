"""The HTTP API on a real uvicorn server (ephemeral loopback port): every route, bad bodies,
unknown ids, an over-size upload and the bearer token."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from presdep.bench import core
from presdep.bench.http_api import create_app

TOKEN = "bench-token-123"
LIMIT = 200_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, **kw):
        import uvicorn

        self.port = _free_port()
        cfg = uvicorn.Config(create_app(**kw), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            time.sleep(0.05)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)

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
