"""A fault-injecting OpenAI-compatible chat-completions server on 127.0.0.1.

``faults`` maps a marker word of the prompt to per-attempt behaviours; attempts are
counted per ORIGINAL prompt (its query and document lines), so a retried request
whose text carries a retry note counts as the next attempt of the same prompt.
After the plan runs out the prompt is answered well, unless the last behaviour
starts with ``always``.

Behaviours: ``ok``, ``429`` / ``429:<seconds>`` (with Retry-After), ``always429``,
any other status ``NNN`` once or ``alwaysNNN`` for good (an error body),
``timeout`` (answers after 1 s), ``slow`` (answers after ``slow_s``), ``truncated``
(half a JSON body), ``trickle`` (headers, then one whitespace byte every
``trickle_every_s`` for ``trickle_bytes`` bytes), ``wrong_count``, ``always_dup``,
``out_of_range``, ``bad_unless_retried`` (unreadable unless the text carries a retry note).

With ``require_key`` set, a request whose Authorization is not ``Bearer <key>``
gets a 401 whose body ECHOES the Authorization header it received, as some
servers do; ``echo_auth`` makes every error body echo it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from presdep.config import hosted_defaults


class JSONHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 JSON replies, quiet; a client that already left is not an error."""

    protocol_version = "HTTP/1.1"

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

    def _send_chat(self, model: str, text: str, *, usage: tuple[int, int], truncated: bool = False,
                   completion_id: str = "chatcmpl-1"):
        """A chat-completions reply carrying ``text``; ``truncated`` sends half the body and hangs up."""
        prompt_tokens, completion_tokens = usage
        body = json.dumps({
            "id": completion_id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }).encode()
        if truncated:
            body = body[: len(body) // 2]
            self.close_connection = True
        return self._send(200, body)


_REASONS = {400: "bad request", 401: "invalid api key", 403: "forbidden", 404: "no such model",
            422: "unprocessable", 500: "boom", 503: "overloaded"}


def docs_in(content: str) -> int:
    return len(re.findall(r"^\[\d+\] ", content, re.M))


def good_reply(n: int) -> str:
    return "\n".join(f"[{i}] Grade: {i % 4}" for i in range(1, n + 1))


def prompt_key(content: str) -> str:
    """The original prompt: its query line and document lines (a retry note is neither)."""
    return "\n".join(ln for ln in content.splitlines() if ln.startswith("Query:") or re.match(r"^\[\d+\] ", ln))


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 (an ephemeral port unless given), run as a context
    manager; ``url`` is its OpenAI-style base URL."""

    def _serve(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class FaultServer(LoopbackServer):
    def __init__(self, faults: dict[str, list[str]] | None = None, *, require_key: str | None = None,
                 echo_auth: bool = False, slow_s: float = 0.3, trickle_every_s: float = 0.05,
                 trickle_bytes: int = 400):
        self.faults = dict(faults or {})
        self.require_key = require_key
        self.echo_auth = echo_auth
        self.slow_s, self.trickle_every_s, self.trickle_bytes = slow_s, trickle_every_s, trickle_bytes
        self.lock = threading.Lock()
        self.requests = 0
        self.log: list[dict] = []  # one entry per request: content, auth, action
        self.attempts: dict[str, int] = {}
        self.trickled: list[int] = []  # bytes each trickle managed to send before the client left
        server = self

        class Handler(JSONHandler):

            def _error(self, code, message, headers=()):
                err: dict = {"error": {"message": message, "type": "fault", "code": code}}
                if server.echo_auth or code == 401:
                    err["error"]["received_headers"] = {"Authorization": self.headers.get("Authorization", "")}
                    err["error"]["message"] += f" (Authorization: {self.headers.get('Authorization', '')})"
                return self._send(code, json.dumps(err).encode(), headers)

            def _trickle(self, n):
                body = b" " * server.trickle_bytes
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                sent = 0
                try:
                    self.wfile.flush()
                    for i in range(len(body)):
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                        sent += 1
                        time.sleep(server.trickle_every_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                with server.lock:
                    server.trickled.append(sent)
                self.close_connection = True

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                req = json.loads(raw)
                content = req["messages"][-1]["content"]
                auth = self.headers.get("Authorization", "")
                pkey = prompt_key(content)
                with server.lock:
                    server.requests += 1
                    a = server.attempts.get(pkey, 0)
                    server.attempts[pkey] = a + 1
                    plan = next((v for m, v in server.faults.items() if m in pkey), [])
                    action = plan[a] if a < len(plan) else plan[-1] if plan and plan[-1].startswith("always") else "ok"
                    if server.require_key is not None and auth != f"Bearer {server.require_key}":
                        action = "401"
                    server.log.append({"content": content, "auth": auth, "action": action})
                n = docs_in(content)
                if action.startswith("429") or action == "always429":
                    after = action.split(":", 1)[1] if ":" in action else "0.05"
                    return self._error(429, "slow down", [("Retry-After", after)])
                code = action[len("always"):] if action.startswith("always") else action
                if code.isdigit():
                    return self._error(int(code), _REASONS.get(int(code), "fault"))
                if action == "trickle":
                    return self._trickle(n)
                if action == "timeout":
                    time.sleep(1.0)
                if action == "slow":
                    time.sleep(server.slow_s)
                text = {"wrong_count": good_reply(n - 1), "always_dup": good_reply(n) + "\n[1] Grade: 2",
                        "out_of_range": good_reply(n).replace("[1] Grade: 1", "[1] Grade: 7")}.get(action, good_reply(n))
                if action == "bad_unless_retried" and "Retry" not in content:
                    text = "I think they are all relevant."
                return self._send_chat(req["model"], text, usage=(100, 10), truncated=action == "truncated")

        self._serve(Handler)


def hosted_spec(url: str | None, **kw) -> dict:
    """Complete endpoint settings for tests: the schema's defaults, fast retries, then ``kw``."""
    return {**hosted_defaults(), "base_url": url, "model": "grader-1", "api_key_env": "PRESDEP_TEST_KEY",
            "concurrency": 3, "max_retries": 3, "parse_retries": 1, "base_delay_s": 0.001, "max_delay_s": 0.2,
            "timeout_s": 0.5, **kw}
