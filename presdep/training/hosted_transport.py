"""The transport side of the hosted grader: one reply from the endpoint, retried as the settings say.

:class:`RetryingTransport` is mixed into :class:`presdep.training.hosted.HostedGrader`: its
client (the official ``openai`` client from :mod:`presdep.training.hosted_net`, made on first
use, or the offline ``mock`` stand-in) and :meth:`RetryingTransport._call`, which sends one
request under the total deadline. 429, 408/409, 5xx, timeouts, connection errors and malformed
bodies are retried with exponential backoff and full jitter (``Retry-After`` honoured up to
``max_retry_after_s``; hitting that ceiling is logged and counted); other 4xx fail at once, and
401/403/404 (:data:`ENDPOINT_STATUSES`) stop every later request to the endpoint. A request
that ends without a reply raises :class:`HostedFailure`, its message scrubbed.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from types import SimpleNamespace
from typing import Any, Mapping

from presdep.contracts.errors import PresdepError
from presdep.training.hosted_net import make_openai_client, request_deadline, scrub

# The grader's logger: its retries and refusals are configured and filtered under that name.
log = logging.getLogger("presdep.training.hosted")

# Statuses that concern the endpoint (key, permission, path or model), not one prompt.
ENDPOINT_STATUSES = (401, 403, 404)


class HostedFailure(PresdepError, RuntimeError):
    """A request (or a job) that ended without usable replies; the message is scrubbed."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(scrub(message))
        self.status = status


class _MockCompletions:
    """Offline stand-in with the chat-completions shape; deterministic, never a real model."""

    def create(self, *, model, messages, **kwargs):
        text = messages[-1]["content"]
        query = re.search(r"^Query: (.*)$", text, re.M)
        qtok = set(re.findall(r"[a-z0-9]+", (query.group(1) if query else "").lower()))
        lines = []
        for m in re.finditer(r"^\[(\d+)\] ?(.*)$", text, re.M):
            i, body = int(m.group(1)), m.group(2)
            dtok = set(re.findall(r"[a-z0-9]+", body.lower()))
            overlap = len(qtok & dtok) / max(len(qtok), 1)
            g = min(3, int(overlap * 4))
            if i == 1:  # a first-slot bias, so presentation dependence is visible
                g = min(3, g + 1)
            lines.append(f"[{i}] Grade: {g}")
        content = "\n".join(lines)
        usage = SimpleNamespace(prompt_tokens=len(text.split()), completion_tokens=len(content.split()))
        msg = SimpleNamespace(content=content)
        return SimpleNamespace(choices=[SimpleNamespace(message=msg)], usage=usage, model=f"mock:{model}")


def _retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, openai.APIResponseValidationError,
                            json.JSONDecodeError, _MalformedReply))


def _retry_after(exc: BaseException) -> float | None:
    resp = getattr(exc, "response", None)
    headers = getattr(resp, "headers", None)
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            from email.utils import parsedate_to_datetime

            try:
                value = parsedate_to_datetime(raw).timestamp() - time.time()
            except (TypeError, ValueError):
                continue
        if math.isfinite(value):
            return max(0.0, value)
    return None


class _MalformedReply(PresdepError, ValueError):
    pass


def _say(exc: BaseException | None) -> str:
    """An exception as one scrubbed log/message fragment."""
    if exc is None:
        return ""
    return scrub(f"{type(exc).__name__}: {exc}".replace("\n", " "))[:300]


def _status(exc: BaseException | None) -> int | None:
    code = getattr(exc, "status_code", None)
    return int(code) if isinstance(code, int) else None


class RetryingTransport:
    """The client and the retried call of :class:`~presdep.training.hosted.HostedGrader`.

    Works on the grader's state: ``settings``, ``mock``, ``endpoint``, ``_client``, ``_lock``,
    ``_refused`` / ``_refused_status`` (set after a 401/403/404), ``_sleep``, ``_rng`` and its
    counters (``_count``).
    """

    @property
    def client(self):
        """The client, made on first use: a fully cached run never needs the key."""
        with self._lock:
            if self._client is None:
                if self.mock:
                    self._client = SimpleNamespace(chat=SimpleNamespace(completions=_MockCompletions()))
                else:
                    self._client = make_openai_client(self.settings["base_url"], self.settings["api_key_env"],
                                                      float(self.settings["timeout_s"]))
            return self._client

    def _wait(self, exc: BaseException, i: int) -> float:
        """Seconds before retry ``i + 1``: full jitter, or the server's Retry-After up to its ceiling."""
        s = self.settings
        after = _retry_after(exc)
        if after is None:
            return self._rng.uniform(0.0, min(float(s["max_delay_s"]), float(s["base_delay_s"]) * (2**i)))
        ceiling = float(s["max_retry_after_s"])
        if after > ceiling:
            self._count(retry_after_capped=1)
            log.warning("hosted endpoint %s asked to wait %.1f s (Retry-After); waiting the ceiling "
                        "max_retry_after_s = %.1f s instead", scrub(self.endpoint), after, ceiling)
            after = ceiling
        return after + self._rng.uniform(0.0, 0.1 * float(s["base_delay_s"]))

    def _call(self, body: Mapping[str, Any]) -> dict:
        """One reply, with transport retries; raises HostedFailure when they run out."""
        s = self.settings
        client = self.client  # may raise HostedConfigError: a setup error, not a failed prompt
        last: BaseException | None = None
        for i in range(int(s["max_retries"]) + 1):
            if self._refused is not None:
                raise HostedFailure(f"not sent: {self._refused}", self._refused_status)
            if i:
                self._count(retries=1)
            self._count(requests=1)
            try:
                with request_deadline(float(s["timeout_s"])):
                    resp = client.chat.completions.create(**body)
                try:
                    content = resp.choices[0].message.content
                except (AttributeError, IndexError, TypeError) as exc:
                    raise _MalformedReply(f"reply without choices[0].message ({type(exc).__name__})") from None
                usage = getattr(resp, "usage", None)
                entry = {
                    "content": content,
                    "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
                    "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
                    "model": getattr(resp, "model", None),
                }
                self._count(prompt_tokens_paid=entry["prompt_tokens"], completion_tokens_paid=entry["completion_tokens"])
                return entry
            except Exception as exc:  # noqa: BLE001 - classified just below
                code = _status(exc)
                if not _retryable(exc):
                    msg = f"endpoint {self.endpoint} answered HTTP {code}: {_say(exc)}" if code else \
                        f"endpoint {self.endpoint}: non-retryable {_say(exc)}"
                    if code in ENDPOINT_STATUSES:
                        with self._lock:
                            if self._refused is None:
                                self._refused, self._refused_status = msg, code
                                log.error("%s; no further request is sent to this endpoint in this run", scrub(msg))
                    raise HostedFailure(msg, code) from None
                last = exc
                if i == int(s["max_retries"]):
                    break
                delay = self._wait(exc, i)
                log.info("retrying after %s (%.2fs)", _say(exc), delay)
                self._sleep(delay)
        code = _status(last)
        raise HostedFailure(f"endpoint {self.endpoint}: gave up after {int(s['max_retries']) + 1} attempts"
                            + (f", last HTTP {code}" if code else "") + f": {_say(last)}", code)


__all__ = ["ENDPOINT_STATUSES", "HostedFailure", "RetryingTransport"]
