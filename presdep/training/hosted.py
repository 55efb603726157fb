"""A hosted chat model that writes integer grades: teacher for silver labels and a scorer.

Any OpenAI-compatible chat-completions endpoint, through the official ``openai``
client (base URL and model from the config; the API key ONLY from the environment
variable the config names, read when a request must actually be sent, never
stored, logged or written). The prompt is the versioned grading template
(:mod:`presdep.scoring.template`); the reply must hold exactly one line
``[i] Grade: g`` per document, i = 1..n once each, g in 0..3. Grades are never
filled in by presentation order.

What a request may end as, per distinct prompt:

- a label (``GradeResult.kind == "ok"``);
- a *parse* failure: every reply asked in this run was unreadable. A reply that
  fails to parse is retried with a CHANGED request (attempt ``a >= 1`` appends a
  stricter, numbered instruction, so it is not the identical temperature-0 call);
  cached unreadable replies are walked for free, and each run pays at most
  ``parse_retries + 1`` new attempts, so a re-run really retries only the failures;
- a *transport* failure: an HTTP error status, an unreachable host, a reply past
  the total deadline, with the status recorded. 429, 408/409, 5xx, timeouts,
  connection errors and malformed bodies are retried with exponential backoff
  and full jitter (``Retry-After`` honoured up to ``max_retry_after_s``; hitting
  that ceiling is logged and counted); other 4xx fail at once, and 401/403/404
  stop every later request to the endpoint (they concern the endpoint, not one prompt).
  The client and these retries are :mod:`presdep.training.hosted_transport`'s.

:func:`failure_gate` turns the counts into the job's verdict: more than
``max_transport_failure_share`` transport failures or ``max_parse_failure_share``
parse failures and it raises :class:`HostedFailure` with the endpoint's status and
the counts. Every message and log line goes through :func:`presdep.training.hosted_net.scrub`.

Robustness: replies are cached on disk (:mod:`presdep.training.hosted_cache`, key
from the normalised endpoint, request body and attempt; each entry verified
against its request); one request in flight per distinct prompt; a total
per-request deadline of ``timeout_s``; a bounded thread pool. Token counts,
requests, cache hits, retries and failures are summed in :attr:`HostedGrader.stats`.

``provider: mock`` answers offline without a key (a deterministic lexical-overlap
grader with a first-slot bias); everything it produces is labelled ``mock``.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

from presdep.config.records import PromptSettings, ScoringRun, thaw
from presdep.contracts.errors import InvalidInput, PresdepError
from presdep.contracts.readouts import GradeReadout, PromptScorer
from presdep.scoring.template import load_template, prepare_doc
from presdep.training.hosted_cache import ReplyCache, request_key
from presdep.training.hosted_net import HostedConfigError, normalise_endpoint, scrub
from presdep.training.hosted_transport import ENDPOINT_STATUSES, HostedFailure, RetryingTransport

log = logging.getLogger(__name__)

# Every setting the grader reads. Their defaults live in the workflow schema only
# (presdep/config/schema.yaml, $defs.hosted_settings): the library takes them whole.
HOSTED_REQUIRED = (
    "provider", "api_key_env", "template", "temperature", "concurrency", "max_retries", "parse_retries",
    "base_delay_s", "max_delay_s", "max_retry_after_s", "timeout_s", "max_parse_failure_share",
    "max_transport_failure_share",
)
HOSTED_OPTIONAL = ("base_url", "model", "max_tokens")
_SECRET_KEYS = ("api_key", "key", "token", "authorization")
_LINE = re.compile(r"^\s*\[(\d+)\]\s*Grade:\s*(-?\d+)\s*$")


class GradeParseError(PresdepError, ValueError):
    """A reply does not hold exactly one valid grade per document."""



def hosted_settings(spec: Mapping[str, Any]) -> dict:
    """The validated endpoint settings: every key of :data:`HOSTED_REQUIRED`, no secret, nothing unknown."""
    s = dict(spec)
    leaked = [k for k in s if k.lower() in _SECRET_KEYS]
    if leaked:
        raise InvalidInput(
            f"hosted settings must not hold a secret ({leaked}); name the environment variable in 'api_key_env'"
        )
    unknown = sorted(set(s) - set(HOSTED_REQUIRED) - set(HOSTED_OPTIONAL))
    if unknown:
        raise InvalidInput(f"hosted settings: unknown key(s) {unknown}; known: {sorted(HOSTED_REQUIRED + HOSTED_OPTIONAL)}")
    missing = [k for k in HOSTED_REQUIRED if k not in s]
    if missing:
        raise InvalidInput(f"hosted settings lack {missing} (the workflow fills them from the config schema's defaults)")
    for k in HOSTED_OPTIONAL:
        s.setdefault(k, None)
    if s["provider"] not in ("openai", "mock"):
        raise InvalidInput(f"hosted provider {s['provider']!r} not in ('openai', 'mock')")
    if s["provider"] == "openai" and (not s["model"] or not s["base_url"]):
        raise InvalidInput("a hosted teacher/scorer needs 'base_url' and 'model'")
    if int(s["concurrency"]) < 1:
        raise InvalidInput("hosted concurrency must be >= 1")
    for k in ("max_parse_failure_share", "max_transport_failure_share"):
        if not 0.0 <= float(s[k]) <= 1.0:
            raise InvalidInput(f"hosted {k} must be in [0, 1], got {s[k]!r}")
    return s


def public_settings(spec: Mapping[str, Any]) -> dict:
    """Settings safe to write into metadata and logs (no secret can be here, see hosted_settings)."""
    s = hosted_settings(spec)
    if s["base_url"]:
        s["base_url"] = scrub(s["base_url"])
    return s


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


def retry_note(attempt: int, n: int) -> str:
    """The stricter instruction appended to attempt ``attempt >= 1`` of a prompt (changes the request)."""
    return (f"\n\nRetry {attempt}: an earlier reply could not be read. Answer with exactly {n} lines, "
            f"one per document from [1] to [{n}], each exactly \"[i] Grade: g\" with g in 0, 1, 2, 3, and no other text.")


@dataclass
class GradeResult:
    grades: list[int] | None
    error: str | None = None
    attempts: int = 0
    kind: str = "ok"  # ok | parse | transport
    status: int | None = None  # HTTP status of a transport failure, when there was one


@dataclass
class HostedStats:
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    parse_retry_requests: int = 0
    shared_in_flight: int = 0
    retry_after_capped: int = 0
    cache_set_aside: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_paid: int = 0
    completion_tokens_paid: int = 0
    parse_errors: int = 0
    prompts: int = 0
    prompts_ok: int = 0
    failures: dict = field(default_factory=dict)
    statuses: dict = field(default_factory=dict)  # HTTP status of failed prompts -> count
    first_error: str | None = None

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["failures"] = dict(self.failures)
        d["statuses"] = dict(self.statuses)
        d["prompts_failed"] = sum(self.failures.values())
        return d


# ----------------------------------------------------------------- grader


class HostedGrader(RetryingTransport):
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
        self.endpoint = "mock" if self.mock else normalise_endpoint(self.settings["base_url"])
        self._client = client
        self.stats = HostedStats()
        self._lock = threading.Lock()
        self._inflight: dict[str, Future] = {}
        self._refused: str | None = None  # set after a 401/403/404: later prompts are not sent
        self._refused_status: int | None = None
        self._sleep = sleep
        self._rng = random.Random()
        if self.mock:
            log.warning("hosted provider 'mock': offline stand-in grades, NOT a real model")

    def describe(self) -> dict:
        d = public_settings(self.settings)
        d["endpoint"] = scrub(self.endpoint)
        d["template_sha256"] = self.template.sha256
        d["mock"] = self.mock
        return d

    def request_body(self, query: str, docs: Sequence[str], attempt: int = 0) -> dict:
        user = self.template.render(query, [prepare_doc(x, self.max_doc_chars) for x in docs], self.max_doc_chars)
        if attempt:
            user += retry_note(attempt, len(docs))
        body: dict[str, Any] = {
            "model": self.settings["model"] or "mock",
            "messages": [{"role": "user", "content": user}],
            "temperature": float(self.settings["temperature"]),
        }
        if self.settings["max_tokens"]:
            body["max_tokens"] = int(self.settings["max_tokens"])
        return body

    def _request(self, body: Mapping[str, Any], attempt: int) -> dict:
        """The identity of one request: what its cache entry must answer."""
        return {"endpoint": self.endpoint, "model": body["model"], "body": dict(body), "attempt": attempt,
                "template": self.template.sha256}

    def _count(self, **inc: int) -> None:
        with self._lock:
            for k, v in inc.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _grade_distinct(self, query: str, docs: Sequence[str]) -> GradeResult:
        """Walk this prompt's attempts: cached ones for free, at most parse_retries + 1 paid ones."""
        n = len(docs)
        budget = int(self.settings["parse_retries"]) + 1
        paid, attempt, err = 0, 0, None
        while True:
            body = self.request_body(query, docs, attempt)
            request = self._request(body, attempt)
            key = request_key(request)
            entry = self.cache.get(key, request)
            if entry is not None:
                self._count(cache_hits=1)
            else:
                if paid >= budget:
                    break
                try:
                    entry = self._call(body)
                except HostedFailure as exc:
                    return GradeResult(None, str(exc), attempt + 1, "transport", exc.status)
                paid += 1
                if attempt:
                    self._count(parse_retry_requests=1)
                entry["request"] = request
                self.cache.put(key, entry)
            self._count(prompt_tokens=entry["prompt_tokens"], completion_tokens=entry["completion_tokens"])
            try:
                grades = parse_grades(entry["content"], n)
            except GradeParseError as exc:
                self._count(parse_errors=1)
                err = f"unparseable reply (attempt {attempt}): {scrub(exc)}"
                attempt += 1
                continue
            return GradeResult(grades, None, attempt + 1)
        return GradeResult(None, err, attempt, "parse")

    def grade(self, query: str, docs: Sequence[str]) -> GradeResult:
        """One prompt's grades; a prompt already in flight in another thread is waited for, not re-sent."""
        key = request_key(self._request(self.request_body(query, docs), 0))
        with self._lock:
            fut = self._inflight.get(key)
            owner = fut is None
            if owner:
                fut = self._inflight[key] = Future()
        if owner:
            try:
                fut.set_result(self._grade_distinct(query, docs))
            except BaseException as exc:
                fut.set_exception(exc)
            finally:
                with self._lock:
                    self._inflight.pop(key, None)
        else:
            self._count(shared_in_flight=1)
        result = fut.result()
        self._record(result)
        return result

    def _record(self, r: GradeResult) -> None:
        with self._lock:
            st = self.stats
            st.prompts += 1
            st.cache_set_aside = len(self.cache.set_aside)
            if r.kind == "ok":
                st.prompts_ok += 1
                return
            st.failures[r.kind] = st.failures.get(r.kind, 0) + 1
            if r.status is not None:
                st.statuses[str(r.status)] = st.statuses.get(str(r.status), 0) + 1
            if st.first_error is None:
                st.first_error = r.error

    def grade_many(self, prompts: Sequence[tuple[str, Sequence[str]]], desc: str = "hosted") -> list[GradeResult]:
        with ThreadPoolExecutor(max_workers=int(self.settings["concurrency"])) as pool:
            futures = [pool.submit(self.grade, q, d) for q, d in prompts]
            return [f.result() for f in tqdm(futures, desc=desc, unit="prompt")]


def failure_gate(stats: Mapping[str, Any], settings: Mapping[str, Any], what: str) -> None:
    """Raise :class:`HostedFailure` when more prompts ended without a label than the settings allow.

    ``stats`` is :meth:`HostedStats.as_dict`; the message names the endpoint's
    statuses, the counts and the allowed shares.
    """
    total = int(stats["prompts"])
    transport = int(stats["failures"].get("transport", 0))
    parse = int(stats["failures"].get("parse", 0))
    t_share, p_share = float(settings["max_transport_failure_share"]), float(settings["max_parse_failure_share"])
    over = []
    if transport > t_share * total:
        over.append(f"{transport} transport/authentication failure(s) (allowed: {t_share:g} of the prompts)")
    if parse > p_share * total:
        over.append(f"{parse} unreadable repl(ies) after their retries (allowed: {p_share:g} of the prompts)")
    if not over:
        return
    statuses = ", ".join(f"HTTP {k} x{v}" for k, v in sorted(stats["statuses"].items())) or "no HTTP status"
    raise HostedFailure(
        f"{what}: {transport + parse} of {total} prompts ended without a label: " + "; ".join(over)
        + f". Endpoint status: {statuses}; first error: {stats.get('first_error')}. "
        "Paid replies are cached: fix the cause and re-run to retry only the failures."
    )


# ----------------------------------------------------------------- scorer


class HostedScorer(PromptScorer):
    """The hosted-model row of Table 1 as a :class:`presdep.scoring.Scorer`.

    Scores are the integer grades (no probabilities). Ties are frequent: the
    metrics break them by doc id, independently of the presented order; tau-PSI
    is not reported for this row (``describe()["tau_psi"]``). A prompt that ends
    as a failure of any kind stops the job with an error (a score is never filled
    in); the reply cache keeps what was paid, so a re-run only asks again for the failures.
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

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        results = self.grader.grade_many(prompts, desc="hosted score")
        bad = [r for r in results if r.grades is None]
        if bad:
            kinds = {k: sum(r.kind == k for r in bad) for k in ("transport", "parse")}
            statuses = sorted({r.status for r in bad if r.status is not None})
            raise HostedFailure(
                f"hosted scorer: {len(bad)} of {len(results)} prompts failed ({kinds['transport']} transport, "
                f"{kinds['parse']} parse; HTTP {statuses or 'none'}; first: {bad[0].error}). "
                "Paid replies are cached: re-run to retry only the failures"
            )
        return [[GradeReadout(float(g), None) for g in r.grades] for r in results]


def make_hosted(run: ScoringRun, prompt: PromptSettings) -> HostedScorer:
    """Registry factory: the variant's ``hosted`` holds the endpoint settings, ``cache_dir`` the reply cache."""
    spec = run.setting("hosted")
    if not isinstance(spec, Mapping):
        raise InvalidInput("scorer 'hosted' needs a 'hosted' mapping (provider, base_url, model, api_key_env, ...)")
    spec = thaw(spec)
    cache = run.setting("cache_dir") or os.path.join("results", "cache", "hosted", str(spec.get("model") or "mock"))
    return HostedScorer(spec, cache, max_doc_chars=prompt.max_doc_chars)


__all__ = [
    "HOSTED_REQUIRED", "HOSTED_OPTIONAL", "ENDPOINT_STATUSES", "GradeParseError", "HostedFailure", "HostedConfigError",
    "hosted_settings", "public_settings", "parse_grades", "retry_note", "failure_gate", "GradeResult", "HostedStats",
    "HostedGrader", "HostedScorer", "make_hosted",
]
