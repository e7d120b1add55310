"""uvicorn's HTTP/1.1 protocol (h11) with deadlines on reading a request.

uvicorn closes a keep-alive connection that stays idle between requests, but
sets no limit on how long a client may take to send a request: a connection
that sends nothing, or its headers a byte at a time, or a body slower than
any real client, is held open for as long as the client likes, bounded only
by the process's file descriptors (and no API key is needed to hold one: the
key is in the headers never finished). Here a request's head (request line
and headers) must arrive within ``header_timeout`` seconds of its first byte
(or of the connection, for the first request), and its body within
``body_timeout`` seconds of the head; past either, the client is answered a
408 in the API's error shape if no response has started, and the connection
is closed. ``TIMED_OUT`` counts them, by phase, for the metrics.

``ctxwindow serve`` sets the two deadlines from its settings (``configure``)
and passes this class to uvicorn as its ``http`` protocol.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

TIMED_OUT: Counter[str] = Counter()  # connections closed for a late "head" or "body"


class TimedH11Protocol(H11Protocol):
    header_timeout = 10.0
    body_timeout = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: str | None = None  # what the armed deadline is for: "head", "body"
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("head")  # a connection that sends nothing is held no longer

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Arm the deadline of what the connection is waiting for, by h11's state."""
        their = self.conn.their_state
        if their is h11.IDLE:
            if self.conn.trailing_data[0]:  # part of the next head is in
                self._arm("head")
            elif self._phase == "body" or self.cycle is not None:
                self._disarm()  # between requests: uvicorn's keep-alive timeout holds
        elif their is h11.SEND_BODY:
            self._arm("body")
        else:  # the request is in whole (or the connection is closing)
            self._disarm()

    def _arm(self, phase: str) -> None:
        if self._phase == phase:
            return  # a deadline runs from the phase's start, not from each byte
        self._disarm()
        seconds = self.header_timeout if phase == "head" else self.body_timeout
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, None

    def _expired(self, phase: str) -> None:
        self._deadline, self._phase = None, None
        if self.transport.is_closing():
            return
        TIMED_OUT[phase] += 1
        # A late head has no response yet (the cycle, if any, is the previous request's)
        if phase == "head" or self.cycle is None or not self.cycle.response_started:
            self.transport.write(_timed_out(phase))
        self.transport.close()


def _timed_out(phase: str) -> bytes:
    seconds = TimedH11Protocol.header_timeout if phase == "head" else TimedH11Protocol.body_timeout
    what = "headers" if phase == "head" else "body"
    body = orjson.dumps(
        {"error": {"message": f"the request's {what} did not arrive within {seconds:g} s",
                   "type": "invalid_request_error", "param": None, "code": "request_timeout"}}
    )  # fmt: skip
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def configure(header_timeout: float, body_timeout: float) -> type[TimedH11Protocol]:
    """Set the deadlines of this process's connections; the protocol class for uvicorn."""
    TimedH11Protocol.header_timeout = header_timeout
    TimedH11Protocol.body_timeout = body_timeout
    return TimedH11Protocol
