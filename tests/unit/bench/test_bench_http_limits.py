"""The HTTP API's limits on a real uvicorn server built as `presdep bench serve` builds it: values
echoed in error replies are cut, and half-sent requests are timed out while others are served."""

from __future__ import annotations

import json
import socket
import tempfile
import time

import pytest
from bench_server import UvicornServer

from presdep.bench import core, http_api
from presdep.contracts.errors import cut

READ_TIMEOUT = 1.0
BIG = 1_500_000


class Server(UvicornServer):
    """create_app() under the uvicorn settings serve() adds (the read timeout)."""

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def request(self, method: str, path: str, raw: bytes = b"") -> tuple[int, bytes]:
        """(status, body) of one request on its own connection."""
        with self.connect() as s:
            s.sendall(b"%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                      b"Connection: close\r\n\r\n" % (method.encode(), path.encode(), len(raw)) + raw)
            reply = _read_to_end(s)
        head, _, body = reply.partition(b"\r\n\r\n")
        return int(head.split()[1]), body


def _read_to_end(s: socket.socket) -> bytes:
    reply = b""
    try:
        while data := s.recv(65536):
            reply += data
    except ConnectionResetError:
        pass
    return reply


@pytest.fixture(scope="module")
def server():
    with Server(read_timeout_s=READ_TIMEOUT, max_body_bytes=8_000_000) as s:
        yield s


# --- echoed values are cut -------------------------------------------------------------------------


def _detail(server, method, path, body) -> tuple[int, object, int]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    code, reply = server.request(method, path, raw)
    return code, json.loads(reply)["detail"], len(reply)


def test_validation_errors_cut_every_echoed_value(server):
    huge = "x" * BIG
    code, detail, size = _detail(server, "POST", "/v1/score", {"id": "arith-01-v1", "answer": huge})
    assert code == 422 and size < 1000, size
    assert detail[0]["loc"] == ["body", "answer"] and detail[0]["input"] == cut(huge)
    assert detail[0]["input"].endswith(f"... ({BIG:,} characters)")
    # A missing field echoes the whole body as its input; an unknown key is echoed in loc too.
    code, detail, size = _detail(server, "POST", "/v1/score", {"id": "arith-01-v1", "k" * BIG: huge})
    assert code == 422 and size < 2000, size
    by_type = {e["type"]: e for e in detail}
    assert set(by_type) == {"missing", "extra_forbidden"}, detail
    assert by_type["missing"]["input"].endswith(" characters)") and len(by_type["missing"]["input"]) < 120
    assert by_type["extra_forbidden"]["loc"] == ["body", cut("k" * BIG)]
    assert by_type["extra_forbidden"]["input"] == cut(huge)
    # Short values are echoed as they are.
    code, detail, _ = _detail(server, "POST", "/v1/score", {"id": "arith-01-v1", "answer": 5})
    assert code == 422 and detail[0]["input"] == 5


def test_other_error_replies_cut_what_they_echo(server):
    digits = "1" + "0" * BIG + "e400"  # a number that overflows a float, 1.5 million digits long
    code, detail, size = _detail(server, "POST", "/v1/score", b'{"id": "arith-01-v1", "answer": "1", "n": %s}'
                                 % digits.encode())
    assert code == 422 and "non-finite number" in detail and size < 500, (size, detail[:300])
    assert f"({len(digits):,} characters)" in detail
    code, detail, size = _detail(server, "GET", "/v1/tasks/" + "t" * 10_000, b"")
    assert code == 404 and detail == f"unknown task id {cut('t' * 10_000)}" and size < 300


def test_analysis_errors_are_capped_and_name_reports_by_place(server):
    tasks = [{"id": f"q{i}-v1", "score": 1} for i in range(4)]
    model = "m" * 600_000
    code, detail, size = _detail(server, "POST", "/v1/stability", {"reports": [
        {"model": model, "seed": 0, "tasks": tasks}, {"model": model, "seed": 0, "tasks": tasks}]})
    assert code == 422 and size < 700 and "message cut" in detail, (size, detail[:300])
    assert tempfile.gettempdir() not in detail
    code, detail, _ = _detail(server, "POST", "/v1/stability", {"reports": [
        {"model": "m", "seed": 0, "tasks": tasks}, {"model": "m", "seed": 0, "tasks": tasks}]})
    assert code == 422 and "seed 0 appears in both reports[0] and reports[1]" in detail, detail


# --- half-sent requests are timed out -----------------------------------------------------------


def test_half_sent_requests_are_closed_after_the_read_timeout_while_others_are_served(server):
    half_head = server.connect()
    half_head.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    half_body = server.connect()
    half_body.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"id\": ")  # 7 of 100 body bytes
    silent = server.connect()  # connects and sends nothing
    start = time.monotonic()
    # Meanwhile other requests are served, and the slow client trickles bytes (which must not reset its clock).
    while time.monotonic() - start < READ_TIMEOUT * 0.8:
        assert server.request("GET", "/health")[0] == 200
        half_head.sendall(b"X")
        time.sleep(0.1)
    replies, closed_after = {}, {}
    for name, s in (("head", half_head), ("body", half_body), ("silent", silent)):
        replies[name] = _read_to_end(s)
        closed_after[name] = time.monotonic() - start
        s.close()
    assert replies["head"].startswith(b"HTTP/1.1 408 "), replies["head"]
    assert replies["body"].startswith(b"HTTP/1.1 408 "), replies["body"]
    assert b"connection: close" in replies["body"].lower()
    assert "read timeout" in json.loads(replies["body"].partition(b"\r\n\r\n")[2])["detail"]
    assert replies["silent"] in (b"", replies["head"])
    assert all(READ_TIMEOUT * 0.8 <= t < READ_TIMEOUT + 3 for t in closed_after.values()), closed_after
    assert server.request("GET", "/health")[0] == 200


def test_the_read_timeout_is_per_request_and_not_for_the_answer(server, monkeypatch):
    # A keep-alive connection idle between two whole requests is not cut by the read timeout.
    with server.connect() as s:
        for _ in range(2):
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while not reply.endswith(b"}"):
                reply += s.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200"), reply
            time.sleep(READ_TIMEOUT * 1.5)
    # An answer that takes longer than the read timeout to compute is still sent.
    monkeypatch.setattr(core, "stability", lambda paths, **kw: time.sleep(READ_TIMEOUT * 1.5) or {"ok": True})
    body = json.dumps({"reports": [{"model": "m", "tasks": [{"id": "a-v1", "score": 1}]}], "resamples": 10})
    assert server.request("POST", "/v1/stability", body.encode()) == (200, b'{"ok":true}')


def test_the_default_read_timeout():
    assert http_api.DEFAULT_READ_TIMEOUT_S == 30
    with pytest.raises(ValueError, match="read timeout"):
        http_api.uvicorn_options(read_timeout_s=0)
