"""The benchmark as an MCP server over stdio (the official ``mcp`` Python SDK, low level).

Tools: ``list_tasks``, ``get_task``, ``score_answer``, ``run_benchmark`` (keyless
``mock`` provider only: an agent cannot spend a user's API key or load a local
model through this server), ``score_stability``, ``get_provenance``. Every input
schema is closed (``additionalProperties: false`` at every object), which strict
tool modes of hosted models require; arguments are validated against it before a
tool runs. Results come back as JSON text and as structured content.

Error messages never echo a rejected value whole: a value's repr is cut to its
first :data:`SHOWN_CHARS` characters plus its length, and every :class:`ToolError`
message to :data:`MESSAGE_LIMIT` characters. A stdin line that is not a JSON-RPC
message gets a JSON-RPC error reply (see :mod:`presdep.bench.mcp_wire`).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import jsonschema

from presdep.bench import core
from presdep.contracts.errors import PresdepError

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
    "score_stability": ("Paired bootstrap of run reports: rank intervals, P(first), prompt-variant "
                        "sensitivity.", _obj({
                            "reports": {"type": "array", "minItems": 1, "maxItems": 50, "items": _REPORT},
                            "seed": _SEED, "resamples": {"type": "integer", "minimum": 1, "maximum": 20000}},
                            ["reports"])),
    "get_provenance": ("Where the split comes from: generator, seed, digest, counts.", _obj({}, [])),
}


SHOWN_CHARS = 80
"""How much of a rejected value's repr an error message shows."""
MESSAGE_LIMIT = 500
"""Most characters of any ToolError message, the cut marker included."""


def shorten(value: Any) -> str:
    """``repr(value)``, or for a long one its first SHOWN_CHARS characters and its size."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    if isinstance(value, str):
        size = f"{len(value)} characters"
    elif isinstance(value, (list, tuple)):
        size = f"{len(value)} items, {len(text)} characters"
    elif isinstance(value, dict):
        size = f"{len(value)} keys, {len(text)} characters"
    else:
        size = f"{len(text)} characters"
    return f"{text[:SHOWN_CHARS]}… ({size})"


def cap_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` whole, or cut to ``limit`` characters ending in a marker that says so."""
    if len(message) <= limit:
        return message
    marker = f" … [message cut: {len(message)} characters in all]"
    return message[: limit - len(marker)] + marker


class ToolError(PresdepError, ValueError):
    """A tool call that cannot run; its message is capped at MESSAGE_LIMIT characters."""

    def __init__(self, message: str) -> None:
        super().__init__(cap_message(str(message)))


def _schema_message(exc: jsonschema.ValidationError) -> str:
    """jsonschema's message with the rejected instance's repr shortened."""
    message = exc.message
    full = repr(exc.instance)  # jsonschema built its message from this same repr
    return message.replace(full, shorten(exc.instance)) if len(full) > SHOWN_CHARS else message


def _stability(args: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="presdep-mcp-") as d:
        paths = []
        for i, rep in enumerate(args["reports"]):
            p = Path(d) / f"report{i:03d}.json"
            p.write_text(json.dumps(rep), encoding="utf-8")
            paths.append(p)
        return core.stability(paths, seed=args.get("seed"), resamples=args.get("resamples"))


def make_handlers(tasks_path: str | os.PathLike | None = None) -> dict[str, Callable[[dict], Any]]:
    tasks = core.load_split(tasks_path)
    split = "public" if tasks_path is None else Path(tasks_path).name
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
    try:
        jsonschema.validate(args, TOOLS[name][1])
    except jsonschema.ValidationError as exc:
        where = "/".join(map(str, exc.absolute_path)) or "arguments"
        raise ToolError(f"{name}: invalid {where}: {_schema_message(exc)}") from None
    try:
        return handlers[name](args)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        raise ToolError(f"{name}: {exc}") from None


def build_server(tasks_path: str | os.PathLike | None = None):
    import mcp_types as types
    from mcp.server.lowlevel import Server

    handlers = make_handlers(tasks_path)

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


def serve_stdio(tasks_path: str | os.PathLike | None = None) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    from presdep.bench.mcp_wire import ReplyingReadStream

    server = build_server(tasks_path)

    async def main() -> None:
        async with stdio_server() as (read, write):
            # Lines the transport cannot parse come through as Exceptions; answer
            # each with a JSON-RPC error instead of letting the server drop it.
            await server.run(ReplyingReadStream(read, write), write, server.create_initialization_options())

    anyio.run(main)
