"""A hosted chat model that writes integer grades: teacher for silver labels and a scorer.

Any OpenAI-compatible chat-completions endpoint, through the official ``openai``
client (base URL and model from the config; the API key ONLY from the environment
variable the config names, never stored, logged or written). The prompt is the
versioned grading template (:mod:`presdep.scoring.template`); the reply must hold
exactly one line ``[i] Grade: g`` per document, i = 1..n once each, g in 0..3.
A reply with a missing, extra, duplicated or out-of-range grade (or any other
text) is retried, then recorded as a failure: grades are never filled in by
presentation order.

Robustness:

- every reply is cached on disk under a hash of (endpoint, request body, attempt)
  and written atomically, so a re-run or a crash never pays twice;
- 429, 408/409, 5xx, timeouts, connection errors and malformed bodies are retried
  with exponential backoff and full jitter; a ``Retry-After`` header is honoured;
  other 4xx fail at once;
- requests run in a bounded thread pool; token counts, requests, cache hits,
  retries and failures are summed in :attr:`HostedGrader.stats`.

``provider: mock`` answers offline without a key (a deterministic lexical-overlap
grader with a first-slot bias); everything it produces is labelled ``mock``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

from presdep.schemas import write_text_atomic
from presdep.scoring import GradeReadout
from presdep.scoring.template import load_template, prepare_doc

log = logging.getLogger(__name__)

HOSTED_DEFAULTS: dict[str, Any] = {
    "provider": "openai",  # openai | mock
    "base_url": None,
    "model": None,
    "api_key_env": "OPENAI_API_KEY",
    "template": "grade_prompt_v1",
    "temperature": 0.0,
    "max_tokens": None,
    "concurrency": 4,
    "max_retries": 6,  # transport retries per request
    "parse_retries": 2,  # extra attempts after an unparseable reply
    "base_delay_s": 1.0,
    "max_delay_s": 60.0,
    "timeout_s": 60.0,
}
_LINE = re.compile(r"^\s*\[(\d+)\]\s*Grade:\s*(-?\d+)\s*$")
_SECRET_KEYS = ("api_key", "key", "token", "authorization")


class GradeParseError(ValueError):
    """A reply does not hold exactly one valid grade per document."""


class HostedFailure(RuntimeError):
    """A request that ended without a usable reply after its retries."""


def hosted_settings(spec: Mapping[str, Any]) -> dict:
    s = {**HOSTED_DEFAULTS, **dict(spec)}
    leaked = [k for k in s if k.lower() in _SECRET_KEYS]
    if leaked:
        raise ValueError(
            f"hosted settings must not hold a secret ({leaked}); name the environment variable in 'api_key_env'"
        )
    if s["provider"] not in ("openai", "mock"):
        raise ValueError(f"hosted provider {s['provider']!r} not in ('openai', 'mock')")
    if s["provider"] == "openai" and (not s["model"] or not s["base_url"]):
        raise ValueError("a hosted teacher/scorer needs 'base_url' and 'model'")
    if int(s["concurrency"]) < 1:
        raise ValueError("hosted concurrency must be >= 1")
    return s


def public_settings(spec: Mapping[str, Any]) -> dict:
    """Settings safe to write into metadata and logs (no secret can be here, see hosted_settings)."""
    return {k: v for k, v in hosted_settings(spec).items() if k.lower() not in _SECRET_KEYS}


def parse_grades(text: str | None, n: int) -> list[int]:
    """Grades of documents 1..n from a reply, strictly; raises GradeParseError otherwise."""
    if text is None:
        raise GradeParseError("empty reply (no message content)")
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    grades: dict[int, int] = {}
    for ln in lines:
        m = _LINE.match(ln)
        if not m:
            raise GradeParseError(f"unexpected line {ln[:80]!r}")
        i, g = int(m.group(1)), int(m.group(2))
        if not 1 <= i <= n:
            raise GradeParseError(f"document index {i} outside 1..{n}")
        if i in grades:
            raise GradeParseError(f"document {i} graded twice")
        if not 0 <= g <= 3:
            raise GradeParseError(f"grade {g} of document {i} outside 0..3")
        grades[i] = g
    missing = [i for i in range(1, n + 1) if i not in grades]
    if missing:
        raise GradeParseError(f"no grade for document(s) {missing}")
    return [grades[i] for i in range(1, n + 1)]


class ReplyCache:
    """One JSON file per reply, named by the request hash; atomic writes."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        p = self._path(key)
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            log.warning("ignoring a corrupt cache entry %s", p.name)
            return None

    def put(self, key: str, entry: Mapping[str, Any]) -> None:
        write_text_atomic(self._path(key), json.dumps(entry, sort_keys=True))


@dataclass
class GradeResult:
    grades: list[int] | None
    error: str | None = None
    attempts: int = 0


@dataclass
class HostedStats:
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_paid: int = 0
    completion_tokens_paid: int = 0
    parse_errors: int = 0
    prompts: int = 0
    prompts_ok: int = 0
    failures: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["failures"] = dict(self.failures)
        d["prompts_failed"] = sum(self.failures.values())
        return d


# ----------------------------------------------------------------- clients


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


def _make_client(s: Mapping[str, Any]):
    if s["provider"] == "mock":
        return SimpleNamespace(chat=SimpleNamespace(completions=_MockCompletions()))
    try:
        from openai import OpenAI
    except ImportError as exc:  # pragma: no cover - the hosted extra is installed in the venv
        raise ImportError("the hosted teacher/scorer needs the 'openai' package (pip install presdep[hosted])") from exc
    env = s["api_key_env"]
    key = os.environ.get(env)
    if not key:
        raise RuntimeError(f"hosted endpoint {s['base_url']}: the API key environment variable {env!r} is not set")
    # The client's own retries are off: retries, backoff and Retry-After are handled here.
    return OpenAI(base_url=s["base_url"], api_key=key, max_retries=0, timeout=float(s["timeout_s"]))


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


class _MalformedReply(ValueError):
    pass


# ----------------------------------------------------------------- grader


class HostedGrader:
    """Grades prompts of (query, docs) through a chat endpoint; cached, retried, bounded."""

    def __init__(
        self,
        spec: Mapping[str, Any],
        cache_dir: str | os.PathLike,
        *,
        max_doc_chars: int | None = None,
        client: Any = None,
        sleep=time.sleep,
    ):
        self.settings = hosted_settings(spec)
        self.mock = self.settings["provider"] == "mock"
        self.template = load_template(self.settings["template"])
        self.max_doc_chars = max_doc_chars
        self.cache = ReplyCache(cache_dir)
        self.client = client if client is not None else _make_client(self.settings)
        self.stats = HostedStats()
        self._lock = threading.Lock()
        self._sleep = sleep
        self._rng = random.Random()
        if self.mock:
            log.warning("hosted provider 'mock': offline stand-in grades, NOT a real model")

    def describe(self) -> dict:
        d = public_settings(self.settings)
        d["template_sha256"] = self.template.sha256
        d["mock"] = self.mock
        return d

    def request_body(self, query: str, docs: Sequence[str]) -> dict:
        user = self.template.render(query, [prepare_doc(x, self.max_doc_chars) for x in docs], self.max_doc_chars)
        body: dict[str, Any] = {
            "model": self.settings["model"] or "mock",
            "messages": [{"role": "user", "content": user}],
            "temperature": float(self.settings["temperature"]),
        }
        if self.settings["max_tokens"]:
            body["max_tokens"] = int(self.settings["max_tokens"])
        return body

    def _key(self, body: Mapping[str, Any], attempt: int) -> str:
        ident = {"endpoint": self.settings["base_url"] if not self.mock else "mock", "body": body, "attempt": attempt,
                 "template": self.template.sha256}
        return hashlib.sha256(json.dumps(ident, sort_keys=True, ensure_ascii=True).encode()).hexdigest()

    def _count(self, **inc: int) -> None:
        with self._lock:
            for k, v in inc.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _fail(self, kind: str) -> None:
        with self._lock:
            self.stats.failures[kind] = self.stats.failures.get(kind, 0) + 1

    def _call(self, body: Mapping[str, Any]) -> dict:
        """One reply, with transport retries; raises HostedFailure when they run out."""
        s = self.settings
        last: BaseException | None = None
        for i in range(int(s["max_retries"]) + 1):
            if i:
                self._count(retries=1)
            self._count(requests=1)
            try:
                resp = self.client.chat.completions.create(**body)
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
                    "request": dict(body),
                }
                self._count(prompt_tokens_paid=entry["prompt_tokens"], completion_tokens_paid=entry["completion_tokens"])
                return entry
            except Exception as exc:  # noqa: BLE001 - classified just below
                if not _retryable(exc):
                    raise HostedFailure(f"non-retryable error {type(exc).__name__}: {_short(exc)}") from None
                last = exc
                if i == int(s["max_retries"]):
                    break
                cap = min(float(s["max_delay_s"]), float(s["base_delay_s"]) * (2**i))
                delay = self._rng.uniform(0.0, cap)  # full jitter
                after = _retry_after(exc)
                if after is not None:
                    delay = min(float(s["max_delay_s"]), after) + self._rng.uniform(0.0, 0.1 * float(s["base_delay_s"]))
                log.info("retrying after %s (%.2fs): %s", type(exc).__name__, delay, _short(exc))
                self._sleep(delay)
        raise HostedFailure(f"gave up after {int(s['max_retries']) + 1} attempts: {type(last).__name__}: {_short(last)}")

    def grade(self, query: str, docs: Sequence[str]) -> GradeResult:
        body = self.request_body(query, docs)
        n = len(docs)
        self._count(prompts=1)
        attempts = int(self.settings["parse_retries"]) + 1
        err = None
        for attempt in range(attempts):
            key = self._key(body, attempt)
            entry = self.cache.get(key)
            if entry is not None:
                self._count(cache_hits=1)
            else:
                try:
                    entry = self._call(body)
                except HostedFailure as exc:
                    self._fail("transport")
                    return GradeResult(None, str(exc), attempt + 1)
                self.cache.put(key, entry)
            self._count(prompt_tokens=entry["prompt_tokens"], completion_tokens=entry["completion_tokens"])
            try:
                grades = parse_grades(entry["content"], n)
            except GradeParseError as exc:
                self._count(parse_errors=1)
                err = f"unparseable reply: {exc}"
                continue
            self._count(prompts_ok=1)
            return GradeResult(grades, None, attempt + 1)
        self._fail("parse")
        return GradeResult(None, err, attempts)

    def grade_many(self, prompts: Sequence[tuple[str, Sequence[str]]], desc: str = "hosted") -> list[GradeResult]:
        with ThreadPoolExecutor(max_workers=int(self.settings["concurrency"])) as pool:
            futures = [pool.submit(self.grade, q, d) for q, d in prompts]
            out = []
            for f in tqdm(futures, desc=desc, unit="prompt"):
                out.append(f.result())
        return out


def _short(exc: BaseException | None) -> str:
    return str(exc).replace("\n", " ")[:200] if exc is not None else ""


# ----------------------------------------------------------------- scorer


class HostedScorer:
    """The hosted-model row of Table 1 as a :class:`presdep.scoring.Scorer`.

    Scores are the integer grades (no probabilities). Ties are frequent: the
    metrics break them by doc id, independently of the presented order; tau-PSI
    is not reported for this row (``describe()["tau_psi"]``). A prompt that ends
    as a failure stops the job with an error (never filled in); the reply cache
    keeps what was paid, so a re-run only asks again for the failures.
    """

    name = "hosted"
    template_sha256: str

    def __init__(self, spec: Mapping[str, Any], cache_dir: str | os.PathLike, *, max_doc_chars: int | None = None,
                 client: Any = None, sleep=time.sleep):
        self.grader = HostedGrader(spec, cache_dir, max_doc_chars=max_doc_chars, client=client, sleep=sleep)
        self.template_sha256 = self.grader.template.sha256

    def describe(self) -> dict:
        return {
            "scorer": self.name,
            "model": ("mock:" if self.grader.mock else "") + str(self.grader.settings["model"]),
            "hosted": self.grader.describe(),
            "ties": "broken by doc id (order-independent)",
            "tau_psi": "not reported: integer grades tie",
        }

    def score(self, query: str, docs: Sequence[str]) -> list[GradeReadout]:
        return self.score_prompts([(query, docs)])[0]

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        results = self.grader.grade_many(prompts, desc="hosted score")
        bad = [i for i, r in enumerate(results) if r.grades is None]
        if bad:
            raise HostedFailure(
                f"{len(bad)} of {len(results)} hosted prompts failed (first: {results[bad[0]].error}); "
                "paid replies are cached, re-run to retry only the failures"
            )
        return [[GradeReadout(float(g), None) for g in r.grades] for r in results]


def make_hosted(variant: Mapping[str, Any], protocol: Mapping[str, Any]) -> HostedScorer:
    """Registry factory: ``variant["hosted"]`` holds the endpoint settings, ``cache_dir`` the reply cache."""
    spec = variant.get("hosted")
    if not isinstance(spec, Mapping):
        raise ValueError("scorer 'hosted' needs a 'hosted' mapping (provider, base_url, model, api_key_env, ...)")
    cache = variant.get("cache_dir") or os.path.join("results", "cache", "hosted", str(spec.get("model") or "mock"))
    return HostedScorer(spec, cache, max_doc_chars=protocol.get("max_doc_chars"))


__all__ = [
    "HOSTED_DEFAULTS", "GradeParseError", "HostedFailure", "hosted_settings", "public_settings", "parse_grades",
    "ReplyCache", "GradeResult", "HostedGrader", "HostedScorer", "make_hosted",
]
