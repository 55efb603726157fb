"""uvicorn's h11 protocol with a read timeout: each request must arrive whole within it.

uvicorn times out only idle keep-alive connections; a client that opens a connection and
sends nothing, half its headers, or part of its body (a byte now and then: slowloris) holds
the connection, and the app task waiting for the body, forever. Here the clock starts at
the connection and at the first byte of every later request, is not reset by further
bytes, and stops once the request is in whole (the answer may take as long as it takes).
When it runs out, a request begun gets ``408 Request Timeout`` (JSON, ``Connection:
close``) and the connection is closed; one that never sent a byte is just closed.
"""

from __future__ import annotations

import asyncio
import json
import math

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_REQUEST_IN = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)  # the client's side of h11: nothing more to read


def _reply_408(seconds: float) -> bytes:
    detail = (f"request not received whole within the read timeout of {seconds:g} s; send the whole request "
              "at once (the server's --read-timeout sets the limit)")
    body = json.dumps({"detail": detail}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % len(body)) + body


class ReadTimeoutH11Protocol(H11Protocol):
    read_timeout_s: float = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._read_deadline: asyncio.TimerHandle | None = None
        self._request_begun = False
        self._arm_read_deadline()

    def _arm_read_deadline(self) -> None:
        if self._read_deadline is None:
            self._read_deadline = self.loop.call_later(self.read_timeout_s, self._read_timed_out)

    def _disarm_read_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None
        self._request_begun = False

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing() or self.conn.their_state in _REQUEST_IN:
            self._disarm_read_deadline()
        else:  # a request under way: its clock runs from its first byte, more bytes do not reset it
            self._request_begun = True
            self._arm_read_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_read_deadline()
        super().connection_lost(exc)

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        begun = self._request_begun
        cycle = self.cycle if self.cycle is not None and not self.cycle.response_complete else None
        if cycle is not None:
            # The app waits for the rest of the body: its receive() now says the client went away
            # and anything it still sends is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
            begun = begun and not cycle.response_started  # a response under way cannot become a 408
        self.logger.warning("request not received whole within the read timeout of %g s; connection closed",
                            self.read_timeout_s)
        if begun:
            self.transport.write(_reply_408(self.read_timeout_s))
        self.transport.close()


def read_timeout_protocol(seconds: float) -> type[ReadTimeoutH11Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with a read timeout of ``seconds``."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (math.isfinite(seconds)
                                                                                  and seconds > 0):
        raise ValueError(f"read timeout must be a number of seconds > 0, got {seconds!r}")
    return type("ReadTimeoutH11Protocol", (ReadTimeoutH11Protocol,), {"read_timeout_s": float(seconds)})
