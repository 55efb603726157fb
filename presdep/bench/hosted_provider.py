"""The ``openai`` and ``openrouter`` providers: any OpenAI-compatible chat endpoint.

A thin adapter over the hosted teacher's client (:mod:`presdep.training.hosted`):
its transport retries (backoff with jitter, ``Retry-After``, a total deadline per
request, no further requests after a 401/403/404), its verified on-disk reply cache
and its secret scrubbing. The key is read from the environment variable named by
``api_key_env`` only when a request must really be sent, so a fully cached re-run
needs no key. A request that still fails is a failed reply (counted in the report),
never a made-up answer. Settings not given take the defaults of
``$defs.hosted_settings`` in the workflow schema.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from presdep.bench.reply import Reply
from presdep.config import hosted_defaults
from presdep.contracts.errors import InvalidInput
from presdep.training.hosted import HostedFailure, HostedGrader
from presdep.training.hosted_cache import request_key

OPENROUTER_URL = "https://openrouter.ai/api/v1"
INSTRUCTION = "Solve the task. End your reply with a final line of the form 'Answer: <answer>'."
_TUNABLE = ("api_key_env", "concurrency", "max_retries", "timeout_s", "max_tokens", "temperature",
            "base_delay_s", "max_delay_s", "max_retry_after_s")




class HostedProvider:
    def __init__(self, name: str, *, base_url: str | None = None, model: str | None = None,
                 cache_dir: str | os.PathLike, client: Any = None, sleep: Any = None,
                 **settings: Any):
        if name not in ("openai", "openrouter"):
            raise InvalidInput(f"hosted provider {name!r}: expected 'openai' or 'openrouter'")
        unknown = sorted(set(settings) - set(_TUNABLE))
        if unknown:
            raise InvalidInput(f"{name} provider: unknown setting(s) {unknown}; known: {list(_TUNABLE)}")
        if name == "openrouter":
            base_url = base_url or OPENROUTER_URL
            settings.setdefault("api_key_env", "OPENROUTER_API_KEY")
        if not base_url or not model:
            raise InvalidInput(f"{name} provider needs a base URL (--base-url) and a model (--model)")
        spec = {**hosted_defaults(), "provider": "openai", "base_url": base_url, "model": model,
                **{k: v for k, v in settings.items() if v is not None}}
        kw = {"client": client} if client is not None else {}
        if sleep is not None:
            kw["sleep"] = sleep
        self.name = name
        self.grader = HostedGrader(spec, cache_dir, **kw)
        self.model_id = model

    def describe(self) -> dict[str, Any]:
        d = self.grader.describe()
        d.pop("template", None)
        d.pop("template_sha256", None)
        return {**d, "provider": self.name, "stats": self.grader.stats.as_dict()}

    def request_body(self, prompt: str) -> dict[str, Any]:
        s = self.grader.settings
        body: dict[str, Any] = {"model": s["model"], "temperature": float(s["temperature"]),
                                "messages": [{"role": "user", "content": f"{prompt}\n\n{INSTRUCTION}"}]}
        if s["max_tokens"]:
            body["max_tokens"] = int(s["max_tokens"])
        return body

    def _one(self, task: Mapping[str, Any]) -> Reply:
        g = self.grader
        body = self.request_body(task["prompt"])
        # The identity a cache entry must answer (the grading template plays no part here).
        request = {"endpoint": g.endpoint, "model": body["model"], "body": body, "attempt": 0,
                   "purpose": "presdep-bench"}
        key = request_key(request)
        entry = g.cache.get(key, request)
        if entry is not None:
            g._count(cache_hits=1)
        else:
            try:
                entry = g._call(body)  # the hosted client's retries, deadline and refusal handling
            except HostedFailure as exc:
                return Reply(None, str(exc))
            entry["request"] = request
            g.cache.put(key, entry)
        content = entry["content"]
        return Reply(content, None if content is not None else "empty reply")

    def answer(self, tasks: Sequence[Mapping[str, Any]]) -> list[Reply]:
        with ThreadPoolExecutor(max_workers=int(self.grader.settings["concurrency"])) as pool:
            return list(pool.map(self._one, tasks))
