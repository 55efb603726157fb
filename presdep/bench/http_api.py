"""The benchmark over HTTP: a FastAPI app, served by uvicorn on 127.0.0.1 unless told otherwise.

Routes: ``GET /health``, ``GET /v1/tasks``, ``GET /v1/tasks/{id}``, ``POST /v1/score``,
``POST /v1/stability``, ``GET /v1/provenance``, ``GET /v1/index-entry``; the OpenAPI
schema at ``/openapi.json``; every GET route also answers ``HEAD``. With a token, every
route but ``/health`` needs ``Authorization: Bearer <token>`` (401 otherwise, before any
body is read). Bodies are counted as they arrive (chunked ones too) and refused with 413
once they pass ``max_body_bytes``; JSON bodies are parsed strictly (``NaN``,
``Infinity`` and numbers that overflow a float: 422); request bodies are validated (422
with the offending field). ``POST /v1/stability`` is bounded in cost (resamples x task
rows: 413 above ``max_stability_cost``) and in concurrency (429 with ``Retry-After``
when ``max_concurrent_stability`` requests are already running), with the MCP server's
code (:mod:`presdep.bench.limits`). Values echoed in error replies are cut to their first
80 characters and their length; each request must arrive whole within ``read_timeout_s``
(408 and the connection closed otherwise: :mod:`presdep.bench.http_protocol`).
"""

from __future__ import annotations

import hmac
import json
import math
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from presdep.bench import core
from presdep.bench.limits import (
    DEFAULT_MAX_CONCURRENT_STABILITY,
    DEFAULT_MAX_STABILITY_COST,
    MESSAGE_LIMIT,
    StabilityBusy,
    StabilityGate,
    StabilityTooCostly,
    cap_message,
)
from presdep.contracts.errors import CUT_CHARS, cut

DEFAULT_HOST = "127.0.0.1"
DEFAULT_TOKEN_ENV = "PRESDEP_BENCH_TOKEN"
DEFAULT_MAX_BODY_BYTES = 2_000_000
DEFAULT_READ_TIMEOUT_S = 30.0  # a whole request (headers and body) from its first byte; generous for 2 MB
_OPEN_PATHS = {"/health"}
_VERBS_WITH_BODY = {"POST", "PUT", "PATCH", "DELETE"}


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    id: str = Field(min_length=1, max_length=200)
    answer: str = Field(max_length=20000)


class ReportTask(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    id: str = Field(min_length=1)
    score: float | None = Field(ge=0, le=1)  # null only for a failed request (failed: true)
    failed: bool | None = None
    dataset: str | None = None


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: str = Field(min_length=1)
    seed: int | None = None
    higherIsBetter: bool | None = None
    metric: str | None = None
    column: str | None = None
    tasks: list[ReportTask] = Field(min_length=1)
    summary: dict[str, Any] | None = None
    incomplete: bool | None = None


class StabilityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    reports: list[Report] = Field(min_length=1, max_length=50)
    seed: int | None = Field(default=None, ge=0)
    resamples: int | None = Field(default=None, ge=1, le=20000)
    lowerIsBetter: bool | None = None


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NonFinite(f"non-finite number {name} is not allowed in JSON bodies")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= CUT_CHARS else cut(text)
        raise _NonFinite(f"non-finite number {shown} (overflows a float) is not allowed in JSON bodies")
    return value


def strict_json_error(body: bytes) -> str | None:
    """Why ``body`` is refused as JSON beyond plain syntax errors (those stay with FastAPI's 422), or None."""
    try:
        json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NonFinite as exc:
        return str(exc)
    except json.JSONDecodeError:
        return None
    except (ValueError, RecursionError) as exc:  # e.g. an integer over the digit limit, nesting too deep
        return cap_message(f"invalid JSON body: {type(exc).__name__}: {exc}")
    return None


def _is_json(content_type: str | None) -> bool:
    # As FastAPI decides: no content type, or application/json, application/*+json.
    if not content_type:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


async def _send_json(send, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """Pure ASGI layer in front of the routes: bearer token, HEAD as GET, body limit while
    streaming (before anything is buffered past the limit), strict JSON."""

    def __init__(self, app, *, token: str | None, max_body_bytes: int):
        self.app = app
        self.token = token
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        has_body = "transfer-encoding" in headers or headers.get("content-length", "0").strip() not in ("", "0")
        if self.token is not None and scope["path"] not in _OPEN_PATHS:
            given = headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                # Refused before the body is read; with a body pending, close rather than drain it.
                extra = {"WWW-Authenticate": "Bearer", **({"Connection": "close"} if has_body else {})}
                return await _send_json(send, 401, "missing or wrong bearer token", extra)
        if scope["method"] == "HEAD":
            # Answer HEAD as GET with the same status and headers, without the body (and without a second
            # operation per route in the OpenAPI schema); a path with no GET still gets 405, an unknown one 404.
            scope = {**scope, "method": "GET"}
            inner_send = send

            async def send(message):
                if message["type"] == "http.response.body":
                    message = {**message, "body": b""}
                await inner_send(message)

        if not has_body and scope["method"] not in _VERBS_WITH_BODY:
            return await self.app(scope, receive, send)
        limit = self.max_body_bytes
        over = f"request body over {limit} bytes"
        declared = headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            return await _send_json(send, 413, over, {"Connection": "close"})
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away; nobody to answer
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit:  # stop reading here; closing the connection drops the rest
                return await _send_json(send, 413, over, {"Connection": "close"})
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        if body and _is_json(headers.get("content-type")):
            why = strict_json_error(body)
            if why is not None:
                return await _send_json(send, 422, why)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the server's http.disconnect

        return await self.app(scope, replay, send)


def _cut_echo(value: Any) -> Any:
    """A value echoed in an error reply: as it is when short, else its cut text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value if len(repr(value)) <= CUT_CHARS else cut(value)
    if isinstance(value, str):
        return value if len(value) <= CUT_CHARS else cut(value)
    return value if len(json.dumps(value, default=str)) <= CUT_CHARS else cut(value)


def cut_validation_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pydantic's errors with every echoed value cut: the input, the keys in loc, ctx, a long msg."""
    out = []
    for e in errors:
        e = dict(e)
        if "input" in e:
            e["input"] = _cut_echo(e["input"])
        if "loc" in e:
            e["loc"] = [_cut_echo(part) for part in e["loc"]]
        if isinstance(e.get("msg"), str):
            e["msg"] = cap_message(e["msg"], MESSAGE_LIMIT)
        if isinstance(e.get("ctx"), dict):
            e["ctx"] = {k: _cut_echo(v) for k, v in e["ctx"].items()}
        out.append(e)
    return out


def create_app(tasks_path: str | os.PathLike | None = None, *, token: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               max_stability_cost: int = DEFAULT_MAX_STABILITY_COST,
               max_concurrent_stability: int = DEFAULT_MAX_CONCURRENT_STABILITY):
    from fastapi import FastAPI, HTTPException
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    gate = StabilityGate(max_stability_cost, max_concurrent_stability)
    tasks = core.load_split(tasks_path)
    app = FastAPI(title="presdep-bench", version=core.__version__,
                  description="The prompt-sensitivity benchmark: tasks, grading and stability analysis.")
    app.add_middleware(Guard, token=token, max_body_bytes=max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own reply, less the rejected values echoed whole (a 1.5 MB field came back in full).
        return JSONResponse(status_code=422, content={"detail": cut_validation_errors(jsonable_encoder(exc.errors()))})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "tasks": len(tasks), "version": core.__version__}

    @app.get("/v1/tasks")
    def list_tasks(family: str | None = None, variant: str | None = None) -> dict[str, Any]:
        return {"tasks": core.list_tasks(tasks, family, variant)}

    @app.get("/v1/tasks/{task_id}")
    def get_task(task_id: str) -> dict[str, Any]:
        try:
            return core.get_task(tasks, task_id)
        except core.UnknownTask as exc:
            raise HTTPException(404, str(exc)) from None

    @app.post("/v1/score")
    def score(req: ScoreRequest) -> dict[str, Any]:
        try:
            return core.score(tasks, req.id, req.answer)
        except core.UnknownTask as exc:
            raise HTTPException(404, str(exc)) from None

    @app.post("/v1/stability")
    def stability(req: StabilityRequest) -> dict[str, Any]:
        """The paired bootstrap of the reports (``presdep stability``'s JSON for one column): rank
        intervals, P(first), pairwise comparisons, Rank(UB) and tiers at ``tierLevel`` (95%)."""
        reports = []
        for rep in req.reports:
            data = rep.model_dump(exclude_none=True)
            # A failed task keeps its "score": null (the reader requires the key).
            data["tasks"] = [{**t.model_dump(exclude_none=True), "score": t.score} for t in rep.tasks]
            reports.append(data)
        try:
            return gate.run(reports, seed=req.seed, resamples=req.resamples, lower_is_better=req.lowerIsBetter)
        except StabilityTooCostly as exc:
            raise HTTPException(413, str(exc)) from None
        except StabilityBusy as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after_s)}) from None
        except ValueError as exc:  # the reports are unusable (named by their place in the request)
            raise HTTPException(422, str(exc)) from None

    @app.get("/v1/provenance")
    def provenance() -> dict[str, Any]:
        return core.provenance(tasks_path)

    @app.get("/v1/index-entry")
    def index_entry() -> dict[str, Any]:
        return core.index_entry(tasks_path)

    return app


def uvicorn_options(read_timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> dict[str, Any]:
    """uvicorn settings ``serve`` adds: the h11 protocol with the read timeout (``uvicorn.run``/``Config``)."""
    from presdep.bench.http_protocol import read_timeout_protocol

    return {"http": read_timeout_protocol(read_timeout_s)}


def serve(port: int, *, host: str = DEFAULT_HOST, tasks_path: str | os.PathLike | None = None,
          token_env: str = DEFAULT_TOKEN_ENV, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
          max_stability_cost: int = DEFAULT_MAX_STABILITY_COST,
          max_concurrent_stability: int = DEFAULT_MAX_CONCURRENT_STABILITY,
          read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
          log_level: Literal["info", "warning", "error"] = "info") -> None:
    """Serve until interrupted; the token (if any) comes from the environment variable ``token_env``."""
    import uvicorn

    token = os.environ.get(token_env) or None
    app = create_app(tasks_path, token=token, max_body_bytes=max_body_bytes, max_stability_cost=max_stability_cost,
                     max_concurrent_stability=max_concurrent_stability)
    uvicorn.run(app, host=host, port=port, log_level=log_level, **uvicorn_options(read_timeout_s))
