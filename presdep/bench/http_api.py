"""The benchmark over HTTP: a FastAPI app, served by uvicorn on 127.0.0.1 unless told otherwise.

Routes: ``GET /health``, ``GET /v1/tasks``, ``GET /v1/tasks/{id}``, ``POST /v1/score``,
``POST /v1/stability``, ``GET /v1/provenance``, ``GET /v1/index-entry``; the OpenAPI
schema at ``/openapi.json``. With a token, every route but ``/health`` needs
``Authorization: Bearer <token>`` (401 otherwise). Request bodies are validated (422
with the offending field); bodies above ``max_body_bytes`` get 413 before parsing.
"""

from __future__ import annotations

import hmac
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from presdep.bench import core

DEFAULT_HOST = "127.0.0.1"
DEFAULT_TOKEN_ENV = "PRESDEP_BENCH_TOKEN"
DEFAULT_MAX_BODY_BYTES = 2_000_000
_OPEN_PATHS = {"/health"}


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=200)
    answer: str = Field(max_length=20000)


class ReportTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    score: float = Field(ge=0, le=1)
    dataset: str | None = None


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1)
    seed: int | None = None
    higherIsBetter: bool | None = None
    metric: str | None = None
    column: str | None = None
    tasks: list[ReportTask] = Field(min_length=1)
    summary: dict[str, Any] | None = None


class StabilityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reports: list[Report] = Field(min_length=1, max_length=50)
    seed: int | None = Field(default=None, ge=0)
    resamples: int | None = Field(default=None, ge=1, le=20000)
    lowerIsBetter: bool | None = None


def create_app(tasks_path: str | os.PathLike | None = None, *, token: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse

    tasks = core.load_split(tasks_path)
    app = FastAPI(title="presdep-bench", version=core.__version__,
                  description="The prompt-sensitivity benchmark: tasks, grading and stability analysis.")

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if token is not None and request.url.path not in _OPEN_PATHS:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        if request.method in ("POST", "PUT", "PATCH"):
            declared = request.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
                return JSONResponse({"detail": f"request body over {max_body_bytes} bytes"}, status_code=413)
            body = await request.body()  # chunked uploads: count what actually arrived
            if len(body) > max_body_bytes:
                return JSONResponse({"detail": f"request body over {max_body_bytes} bytes"}, status_code=413)
        return await call_next(request)

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
        with tempfile.TemporaryDirectory(prefix="presdep-http-") as d:
            paths = []
            for i, rep in enumerate(req.reports):
                p = Path(d) / f"report{i:03d}.json"
                p.write_text(json.dumps(rep.model_dump(exclude_none=True)), encoding="utf-8")
                paths.append(p)
            try:
                return core.stability(paths, seed=req.seed, resamples=req.resamples,
                                      lower_is_better=req.lowerIsBetter)
            except ValueError as exc:  # ReportError, StabilityError: the reports are unusable
                raise HTTPException(422, str(exc).replace(d + os.sep, "")) from None

    @app.get("/v1/provenance")
    def provenance() -> dict[str, Any]:
        return core.provenance(tasks_path)

    @app.get("/v1/index-entry")
    def index_entry() -> dict[str, Any]:
        return core.index_entry(tasks_path)

    return app


def serve(port: int, *, host: str = DEFAULT_HOST, tasks_path: str | os.PathLike | None = None,
          token_env: str = DEFAULT_TOKEN_ENV, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
          log_level: Literal["info", "warning", "error"] = "info") -> None:
    """Serve until interrupted; the token (if any) comes from the environment variable ``token_env``."""
    import uvicorn

    token = os.environ.get(token_env) or None
    app = create_app(tasks_path, token=token, max_body_bytes=max_body_bytes)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
