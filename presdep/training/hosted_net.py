"""The wire side of the hosted grader: secret scrubbing, a total request deadline, the client.

- :func:`scrub` is the ONE function every log line and exception message of the
  hosted code passes through: it removes every registered key value and any
  ``Authorization``/``Bearer`` credential a server may echo back in an error body.
- :func:`request_deadline` bounds a whole request (connect, send, headers, body):
  every socket operation of the calling thread gets at most the time left, so a
  server that trickles bytes cannot hold a request past ``timeout_s`` (the HTTP
  client's own timeout applies per read only).
- :func:`make_openai_client` builds the official ``openai`` client on that
  transport, its own retries off (retries, backoff and Retry-After are the grader's).
"""

from __future__ import annotations

import os
import re
import threading
import time
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

from presdep.contracts.errors import PresdepError

REDACTED = "[REDACTED]"
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
# "Authorization: Bearer xyz", "'authorization': 'Bearer xyz'", "api-key=xyz" (header echoes in JSON or text)
_HEADER = re.compile(
    r"(?i)((?:proxy-)?authorization|x-api-key|api[-_]?key)([\"']?\s*[:=]\s*[\"']?)"
    r"(?:(?:bearer|basic|token)\s+)?(?!\[REDACTED\])[^\"'\s,;)}\]]+"
)
_SCHEME = re.compile(r"(?i)\b(bearer|basic)\s+(?!\[REDACTED\])[A-Za-z0-9._~+/=\-]{4,}")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@]+@")


class HostedConfigError(PresdepError, RuntimeError):
    """The hosted endpoint cannot be called as configured (e.g. its key variable is unset)."""


def register_secret(value: str | None) -> None:
    """Remember a secret value so that :func:`scrub` removes it wherever it appears."""
    if value and len(value) >= 4:
        with _SECRETS_LOCK:
            _SECRETS.add(value)


def scrub(text: object) -> str:
    """``text`` without any registered secret, credential header value or URL user info."""
    s = str(text)
    with _SECRETS_LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        s = s.replace(secret, REDACTED)
    s = _HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", s)
    s = _SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", s)
    return _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", s)


def normalise_endpoint(url: str) -> str:
    """One spelling per endpoint: lower-case scheme and host, localhost = 127.0.0.1,
    no default port, no user info, no trailing slash."""
    parts = urlsplit(str(url).strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if host == "localhost":
        host = "127.0.0.1"
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = parts.port
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path.rstrip("/"), parts.query, ""))


# ----------------------------------------------------------------- deadline

_LOCAL = threading.local()


@contextmanager
def request_deadline(seconds: float) -> Iterator[None]:
    """Every network operation of this thread inside the block ends by ``seconds`` from now."""
    _LOCAL.at = time.monotonic() + float(seconds)
    _LOCAL.seconds = float(seconds)
    try:
        yield
    finally:
        _LOCAL.at = None


def _left(timeout: float | None, exc_type: type[Exception]) -> float | None:
    at = getattr(_LOCAL, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise exc_type(f"total request deadline of {_LOCAL.seconds:g} s reached")
    return left if timeout is None else min(float(timeout), left)


def _deadline_transport():
    import httpcore2
    import httpx2

    class DeadlineStream(httpcore2.NetworkStream):
        def __init__(self, inner):
            self._inner = inner

        def read(self, max_bytes, timeout=None):
            return self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

        def write(self, buffer, timeout=None):
            return self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

        def close(self):
            return self._inner.close()

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                        _left(timeout, httpcore2.ConnectTimeout)))

        def get_extra_info(self, info):
            return self._inner.get_extra_info(info)

    class DeadlineBackend(httpcore2.NetworkBackend):
        def __init__(self):
            self._inner = httpcore2.SyncBackend()

        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            return DeadlineStream(self._inner.connect_tcp(host, port, _left(timeout, httpcore2.ConnectTimeout),
                                                          local_address, socket_options))

        def connect_unix_socket(self, path, timeout=None, socket_options=None):
            return DeadlineStream(self._inner.connect_unix_socket(path, _left(timeout, httpcore2.ConnectTimeout),
                                                                  socket_options))

        def sleep(self, seconds):
            self._inner.sleep(seconds)

    class DeadlineTransport(httpx2.HTTPTransport):
        """httpx2's default transport over a connection pool whose sockets obey the deadline."""

        def __init__(self):
            super().__init__()
            self._pool = httpcore2.ConnectionPool(
                ssl_context=httpx2.create_ssl_context(), max_connections=100, max_keepalive_connections=20,
                keepalive_expiry=5.0, network_backend=DeadlineBackend(),
            )

    return DeadlineTransport()


def make_openai_client(base_url: str, api_key_env: str, timeout_s: float):
    """The official client for ``base_url``, its key read from ``api_key_env`` now."""
    try:
        import httpx2
        from openai import OpenAI
    except ImportError as exc:  # pragma: no cover - the hosted extra is installed in the venv
        raise ImportError("the hosted teacher/scorer needs the 'openai' package (pip install presdep[hosted])") from exc
    key = os.environ.get(api_key_env)
    if not key:
        raise HostedConfigError(
            f"hosted endpoint {scrub(base_url)}: a request must be sent and the API key environment "
            f"variable {api_key_env!r} is not set"
        )
    register_secret(key)
    http = httpx2.Client(transport=_deadline_transport(), timeout=float(timeout_s))
    return OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=float(timeout_s), http_client=http)


__all__ = ["REDACTED", "HostedConfigError", "register_secret", "scrub", "normalise_endpoint", "request_deadline",
           "make_openai_client"]
