"""The benchmark as an MCP server over stdio (the official ``mcp`` Python SDK, low level).

Tools: ``list_tasks``, ``get_task``, ``score_answer``, ``run_benchmark`` (keyless
``mock`` provider only: an agent cannot spend a user's API key or load a local
model through this server), ``score_stability``, ``get_provenance``. Every input
schema is closed (``additionalProperties: false`` at every object), which strict
tool modes of hosted models require; arguments are validated against it before a
tool runs. Results come back as JSON text and as structured content.

Error messages never echo a rejected value whole: a value's repr is cut to its
first :data:`SHOWN_CHARS` characters plus its length, and every :class:`ToolError`
message to :data:`MESSAGE_LIMIT` characters; they name a value by its place in the
arguments (``reports/1/tasks/3/score``), never a server-side file. NaN and infinities
are refused wherever they appear. ``score_stability`` has the bounds of the HTTP
``/v1/stability`` route (:mod:`presdep.bench.limits`: the same cost, computed by the
same code, and the same concurrency). A stdin line that is not a JSON-RPC message, or
a request whose id is not a string or an integer, gets a JSON-RPC error reply (see
:mod:`presdep.bench.mcp_wire`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import jsonschema

from presdep.bench import core
from presdep.bench.limits import (
    DEFAULT_MAX_CONCURRENT_STABILITY,
    DEFAULT_MAX_STABILITY_COST,
    MESSAGE_LIMIT,
    StabilityBusy,
    StabilityGate,
    cap_message,
    first_non_finite,
)
from presdep.contracts.errors import CUT_CHARS, PresdepError, cut

__all__ = ["DEFAULT_MAX_CONCURRENT_STABILITY", "DEFAULT_MAX_STABILITY_COST", "MESSAGE_LIMIT", "SHOWN_CHARS", "TOOLS",
           "ToolError", "build_server", "call_tool", "cap_message", "make_handlers", "serve_stdio", "shorten"]

_ID = {"type": "string", "minLength": 1, "maxLength": 200, "description": "task id, e.g. arith-01-v2"}
_SEED = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


_REPORT = _obj({
    "model": {"type": "string", "minLength": 1},
    "seed": {"type": "integer"},
    "higherIsBetter": {"type": "boolean"},
    "metric": {"type": "string"},
    "incomplete": {"type": "boolean"},
    # A failed request is {"id", "score": null, "failed": true}: a failure, not a 0.
    "tasks": {"type": "array", "minItems": 1, "items": _obj(
        {"id": {"type": "string", "minLength": 1},
         "score": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
         "failed": {"type": "boolean"}},
        ["id", "score"])},
}, ["model", "tasks"])

TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "list_tasks": ("List task ids with family and prompt variant, optionally filtered.", _obj({
        "family": {"type": "string", "enum": list(core.FAMILIES)},
        "variant": {"type": "string", "enum": list(core.VARIANTS)}}, [])),
    "get_task": ("One task with its prompt (not its answer).", _obj({"id": _ID}, ["id"])),
    "score_answer": ("Grade an answer to a task: score 1 (right) or 0.",
                     _obj({"id": _ID, "answer": {"type": "string", "maxLength": 20000}}, ["id", "answer"])),
    "run_benchmark": ("Run the keyless mock provider over the split (or the first `limit` tasks) and "
                      "return its run report.", _obj({
                          "provider": {"type": "string", "enum": ["mock"]},
                          "seed": _SEED, "run": {"type": "integer", "minimum": 0, "maximum": 1000},
                          "limit": {"type": "integer", "minimum": 1, "maximum": 100000}}, ["provider"])),
    "score_stability": ("Paired bootstrap of run reports: rank intervals, P(first), Rank(UB) and tiers "
                        "(rows not separable at 95%), prompt-variant sensitivity.", _obj({
                            "reports": {"type": "array", "minItems": 1, "maxItems": 50, "items": _REPORT},
                            "seed": _SEED, "resamples": {"type": "integer", "minimum": 1, "maximum": 20000}},
                            ["reports"])),
    "get_provenance": ("Where the split comes from: generator, seed, digest, counts.", _obj({}, [])),
}


SHOWN_CHARS = CUT_CHARS
"""How much of a rejected value's repr an error message shows."""
_JSON_SPELLING = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def shorten(value: Any) -> str:
    """``repr(value)``, or for a long one its first SHOWN_CHARS characters and its size (the shared cut)."""
    return cut(value, SHOWN_CHARS)


class ToolError(PresdepError, ValueError):
    """A tool call that cannot run; its message is capped at MESSAGE_LIMIT characters."""

    def __init__(self, message: str) -> None:
        super().__init__(cap_message(str(message)))


def _schema_message(exc: jsonschema.ValidationError) -> str:
    """jsonschema's message with the rejected instance's repr shortened."""
    message = exc.message
    full = repr(exc.instance)  # jsonschema built its message from this same repr
    return message.replace(full, shorten(exc.instance)) if len(full) > SHOWN_CHARS else message


def make_handlers(tasks_path: str | os.PathLike | None = None, *,
                  max_stability_cost: int = DEFAULT_MAX_STABILITY_COST,
                  max_concurrent_stability: int = DEFAULT_MAX_CONCURRENT_STABILITY) -> dict[str, Callable[[dict], Any]]:
    gate = StabilityGate(max_stability_cost, max_concurrent_stability)
    tasks = core.load_split(tasks_path)
    split = "public" if tasks_path is None else Path(tasks_path).name

    def _stability(args: dict[str, Any]) -> dict[str, Any]:
        return gate.run(args["reports"], seed=args.get("seed"), resamples=args.get("resamples"))

    return {
        "list_tasks": lambda a: {"tasks": core.list_tasks(tasks, a.get("family"), a.get("variant"))},
        "get_task": lambda a: core.get_task(tasks, a["id"]),
        "score_answer": lambda a: core.score(tasks, a["id"], a["answer"]),
        "run_benchmark": lambda a: core.run("mock", tasks[: a.get("limit")], seed=a.get("seed", 0),
                                            run=a.get("run", 0), split=split)["report"],
        "score_stability": _stability,
        "get_provenance": lambda a: core.provenance(tasks_path),
    }


def call_tool(handlers: dict[str, Callable], name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """Validate and run one tool; raises ToolError with a readable message."""
    if name not in TOOLS:
        raise ToolError(f"unknown tool {shorten(name)}; tools: {sorted(TOOLS)}")
    args = arguments or {}
    bad = first_non_finite(args)
    if bad is not None:  # NaN passes JSON Schema's bounds (every comparison with it is false)
        where, number = bad
        raise ToolError(f"{name}: invalid {where}: {_JSON_SPELLING[repr(number)]} is not allowed; "
                        "numbers must be finite")
    try:
        jsonschema.validate(args, TOOLS[name][1])
    except jsonschema.ValidationError as exc:
        where = "/".join(map(str, exc.absolute_path)) or "arguments"
        raise ToolError(f"{name}: invalid {where}: {_schema_message(exc)}") from None
    try:
        return handlers[name](args)
    except (KeyError, ValueError, FileNotFoundError, StabilityBusy) as exc:
        raise ToolError(f"{name}: {exc}") from None


def build_server(tasks_path: str | os.PathLike | None = None, **limits: int):
    """The MCP server; ``limits`` are make_handlers' (max_stability_cost, max_concurrent_stability)."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    handlers = make_handlers(tasks_path, **limits)

    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=n, description=d, input_schema=s) for n, (d, s) in TOOLS.items()])

    async def on_call_tool(ctx, params) -> types.CallToolResult:
        import anyio

        try:
            out = await anyio.to_thread.run_sync(call_tool, handlers, params.name, params.arguments)
        except ToolError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True)
        text = json.dumps(out, allow_nan=False)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=out)

    return Server("presdep-bench", version=core.__version__, on_list_tools=on_list_tools,
                  on_call_tool=on_call_tool)


def serve_stdio(tasks_path: str | os.PathLike | None = None, *,
                max_stability_cost: int = DEFAULT_MAX_STABILITY_COST,
                max_concurrent_stability: int = DEFAULT_MAX_CONCURRENT_STABILITY) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    from presdep.bench.mcp_wire import CheckedLines, ReplyingReadStream, wire_stdin

    server = build_server(tasks_path, max_stability_cost=max_stability_cost,
                          max_concurrent_stability=max_concurrent_stability)

    async def main(stdin) -> None:
        # A request whose id the SDK cannot hold would pass as a notification and get no
        # reply: CheckedLines answers it before the transport reads the line.
        lines = CheckedLines(stdin)
        async with stdio_server(stdin=lines) as (read, write):
            lines.attach(write)
            # Lines the transport cannot parse come through as Exceptions; answer
            # each with a JSON-RPC error instead of letting the server drop it.
            await server.run(ReplyingReadStream(read, write), write, server.create_initialization_options())

    with wire_stdin() as stdin:
        anyio.run(main, stdin)
