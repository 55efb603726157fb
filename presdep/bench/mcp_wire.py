"""JSON-RPC 2.0 error replies for lines the MCP SDK's stdio transport cannot read.

The SDK's ``stdio_server`` parses each stdin line into a JSON-RPC message; a line
that fails puts the pydantic ``ValidationError`` into the read stream, where the
server logs it at debug level and drops it, so the client waits for a reply that
never comes. :class:`ReplyingReadStream` sits between that read stream and
``Server.run``: it passes every ``SessionMessage`` on unchanged (sender context
included) and answers every ``Exception`` item on the transport's write stream,
as JSON-RPC 2.0 requires (https://www.jsonrpc.org/specification#error_object):

* invalid JSON: ``-32700 Parse error`` with ``"id": null``;
* valid JSON that is not a JSON-RPC message (an array, a number, a ``method``
  that is not a string, ...): ``-32600 Invalid Request``, with the message's own
  ``id`` when it is an object carrying a valid one (an integer or a string),
  else ``"id": null``. Batches (arrays) are not part of MCP; they get one
  ``Invalid Request``.

A request (a ``method``) whose ``id`` is not a string or an integer (an object, an
array, a boolean, a fraction, null: JSON-RPC allows no structured id, MCP no null or
fractional one) parses in the SDK as a *notification* (the id is dropped), so the
server would run it and answer nothing. :class:`CheckedLines` sits between stdin and
the transport and answers such a line itself with ``-32600 Invalid Request`` and
``"id": null``; the line goes no further. It reads stdin through :func:`wire_stdin`,
which, as the SDK's own transport does, points fd 0 at the null device meanwhile.

Whitespace-only lines are not messages in newline-delimited framing and get no
reply. ``error.data.detail`` says briefly what was wrong, cut to
:data:`DETAIL_LIMIT` characters. The rejected line is never echoed back.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from types import TracebackType
from typing import Any, AsyncIterable, AsyncIterator, Iterator, Self

import anyio
import mcp_types as types
import pydantic
from mcp.shared.message import SessionMessage

DETAIL_LIMIT = 300
"""Most characters of ``error.data.detail`` in an error reply."""

# The members of the SDK's JSONRPCMessage union, by the field that marks each.
_MEMBER_BY_FIELD = (("method", "JSONRPCRequest"), ("result", "JSONRPCResponse"), ("error", "JSONRPCError"))
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}


def _cut(text: str, limit: int = DETAIL_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _error(request_id: types.RequestId | None, code: int, message: str, detail: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id,
                              error=types.ErrorData(code=code, message=message, data={"detail": _cut(detail)}))


def _top_level(errors: list[dict[str, Any]]) -> tuple[bool, Any]:
    """The decoded message, when pydantic's errors carry it: (found, value).

    A union member that rejects the whole value (``loc == (member,)``) carries it as
    its input; a ``missing`` field (``loc == (member, field)``) carries the object
    that lacks it. Every object misses a field of some member (``JSONRPCResponse``
    needs ``result``, ``JSONRPCError`` needs ``error``) unless it holds all of them.
    """
    for e in errors:
        loc = e.get("loc", ())
        if len(loc) == 1 or (len(loc) == 2 and e.get("type") == "missing"):
            return True, e.get("input")
    return False, None


def _request_id(message: Any) -> types.RequestId | None:
    rid = message.get("id") if isinstance(message, dict) else None
    if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        return rid
    return None


def invalid_id_reply(line: str) -> types.JSONRPCError | None:
    """The ``-32600`` reply to a request whose id is not a string or an integer; None for any other line."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None  # not JSON: the transport's parse error answers it
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    rid = message["id"]
    if _request_id(message) is not None:
        return None
    if isinstance(rid, float):
        kind = "a number with a decimal point or exponent"
    else:
        kind = _JSON_TYPES.get(type(rid), type(rid).__name__)
    return _error(None, types.INVALID_REQUEST, "Invalid Request",
                  f"a request's id must be a string or an integer, not {kind}")


def _invalid_detail(found: bool, message: Any, errors: list[dict[str, Any]]) -> str:
    if not found:
        return "not a JSON-RPC 2.0 request, notification or response"
    if not isinstance(message, dict):
        kind = _JSON_TYPES.get(type(message), type(message).__name__)
        return f"a JSON-RPC message is one JSON object, not {kind} (batches are not part of MCP)"
    member = next((m for field, m in _MEMBER_BY_FIELD if field in message), "JSONRPCRequest")
    if member == "JSONRPCRequest" and "method" in message and "id" not in message:
        member = "JSONRPCNotification"
    problems = [f"{'.'.join(map(str, e['loc'][1:])) or 'message'}: {e.get('msg', 'invalid')}"
                for e in errors if e.get("loc", ())[:1] == (member,)]
    return "not a valid JSON-RPC 2.0 message: " + "; ".join(problems or ["unrecognised shape"])


def error_reply(exc: Exception) -> types.JSONRPCError | None:
    """The JSON-RPC error answering a line the transport could not read; None for a blank line."""
    if not isinstance(exc, pydantic.ValidationError):
        return _error(None, types.PARSE_ERROR, "Parse error", f"unreadable message: {type(exc).__name__}")
    errors = exc.errors(include_url=False, include_context=False)
    parse = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if parse is not None:
        line = parse.get("input")
        if isinstance(line, str) and not line.strip():
            return None
        return _error(None, types.PARSE_ERROR, "Parse error", str(parse.get("msg", "invalid JSON")))
    found, message = _top_level(errors)
    return _error(_request_id(message), types.INVALID_REQUEST, "Invalid Request",
                  _invalid_detail(found, message, errors))


@contextlib.contextmanager
def wire_stdin() -> Iterator[Any]:
    """stdin's lines as an async text file, read from a private duplicate of fd 0.

    fd 0 itself points at the null device meanwhile (as in the SDK's ``stdio_server``,
    which skips that step when given its stdin): a handler or a child process that reads
    stdin gets end-of-file, not the client's messages. fd 0 is restored on exit.
    """
    try:
        private = os.dup(0) if sys.stdin.buffer.fileno() == 0 else None
    except (OSError, ValueError, AttributeError):
        private = None
    if private is None:  # stdin is not fd 0 (an embedding host replaced it): read it in place
        yield anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    # closefd=False: a reader thread may still block on it after the transport ends.
    wire = io.TextIOWrapper(os.fdopen(private, "rb", closefd=False), encoding="utf-8", errors="replace")
    try:
        yield anyio.wrap_file(wire)
    finally:
        os.dup2(private, 0)


class CheckedLines:
    """The lines of ``lines`` for the SDK's stdio transport, less requests with an id it cannot
    hold: each of those is answered on the write stream given to :meth:`attach`."""

    def __init__(self, lines: AsyncIterable[str]) -> None:
        self._lines = lines
        self._write: Any = None
        self._attached = anyio.Event()

    def attach(self, write: Any) -> None:
        self._write = write
        self._attached.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            reply = invalid_id_reply(line)
            if reply is None:
                yield line
                continue
            await self._attached.wait()
            try:
                await self._write.send(SessionMessage(reply))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the connection is closing; there is no one left to tell


class ReplyingReadStream:
    """The transport's read stream without its Exception items, each answered on ``write``.

    Duck-types the SDK's ``ReadStream`` protocol and, like its context-aware stream,
    exposes ``last_context`` (the sender's contextvars of the last message passed on).
    """

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            reply = error_reply(item)
            if reply is None:
                continue
            try:
                await self._write.send(SessionMessage(reply))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # the connection is closing; there is no one left to tell

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> ReplyingReadStream:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> bool | None:
        await self.aclose()
        return None
