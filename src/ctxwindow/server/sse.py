"""The one relay of an upstream's event stream, for every protocol.

Bytes pass through unchanged, cut at line ends, while the protocol's
collector (an ``EventReply``: ``protocols/*``) reads each event. The reply
is stored (``finish()``) before the stream's last event reaches the client:
a client that has seen the end finds it stored. A stream that does not end
properly — it stops before its last event, breaks off (a reset, a read
timeout), has a line that is not a server-sent event of JSON, or reports an
error itself — ends with the protocol's error event instead, and its partial
reply is never stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import httpx
import orjson

from ctxwindow.server.errors import APIError

logger = logging.getLogger(__name__)

DONE: dict[str, Any] = {}  # what ``event_of`` reads ``data: [DONE]`` as (chat's last line)


class Drop:
    """The type of ``DROP``, what ``EventReply.add`` returns for a line the client must not
    get (chat's usage chunk that the service asked for, not the client)."""


DROP = Drop()


class StreamFault(APIError):
    """An upstream stream that did not end properly; ``kind`` labels the error metric."""

    def __init__(self, kind: str, message: str, *, timeout: bool = False) -> None:
        status, code = (504, "upstream_timeout") if timeout else (502, "bad_gateway")
        super().__init__(status, message, code=code)
        self.kind = kind


class EventReply(Protocol):
    """What the relay needs of a protocol: the reply collected from its events."""

    last: str  # the stream's last event, as an error names it ("data: [DONE]")

    def add(self, event: dict[str, Any]) -> bytes | Drop | None:
        """Take one event (``StreamFault`` if it reports a failure); the ``data:`` line to
        send in its place, ``DROP`` to send none, or None to send it as it came."""

    def ends(self, event: dict[str, Any]) -> bool:
        """Whether ``event`` is the stream's last: the reply is stored before it is sent."""

    def error_event(self, error: APIError) -> bytes:
        """``error`` as the event this protocol's SDKs raise on."""


def openai_error_event(error: APIError) -> bytes:
    """``error`` as the SSE event the OpenAI SDKs raise on: ``data: {"error": {...}}``.

    It starts with a blank line, which ends an event the client may have half received.
    """
    return b"\ndata: " + bytes(error.response().body) + b"\n\n"


async def relay(
    chunks: AsyncIterator[bytes],
    reply: EventReply,
    finish: Callable[[], Awaitable[None]] | None = None,
    failed: Callable[[StreamFault], None] | None = None,
) -> AsyncIterator[bytes]:
    """The stream's bytes for the client, lines whole, while ``reply`` collects the reply.

    ``finish()`` (storing the reply) is awaited before the last event is passed
    on, in a task of its own, so a client leaving at that moment does not cancel
    it. A stream that does not end properly ends with ``reply.error_event``
    instead (``failed(fault)`` is told) and ``finish()`` never runs: a partial
    reply is not the reply. So does an ``APIError`` raised by ``finish()``. A
    transport error after the last event (an upstream that closes its connection
    badly once it has said everything) is no fault of the reply: it is logged and
    counted (kind ``after_end``), and the client's stream ends as it should.
    """
    ended = [False]
    try:
        async for piece in _checked(chunks, reply, finish, ended):
            yield piece
    except StreamFault as exc:
        fault = exc
    except httpx.TimeoutException:
        fault = StreamFault("timeout", "the upstream stream timed out before its end", timeout=True)
    except httpx.HTTPError as exc:
        fault = StreamFault("connect", f"the upstream stream broke off: {type(exc).__name__}")
    except APIError as exc:  # from finish(): the reply could not be stored
        yield reply.error_event(exc)
        return
    else:
        return
    if ended[0]:  # the reply was whole (and stored): only end the last event if it was cut
        logger.warning("the upstream closed its stream badly after the last event: %s", fault)
        if failed is not None:
            failed(StreamFault("after_end", str(fault)))
        yield b"\n"
        return
    if failed is not None:
        failed(fault)
    yield reply.error_event(fault)


async def relay_response(
    response: httpx.Response,
    reply: EventReply,
    finish: Callable[[], Awaitable[None]] | None = None,
    failed: Callable[[StreamFault], None] | None = None,
) -> AsyncIterator[bytes]:
    """``relay`` of an open upstream response, closed at the end."""
    try:
        async for piece in relay(response.aiter_bytes(), reply, finish, failed):
            yield piece
    finally:
        await response.aclose()


async def _checked(
    chunks: AsyncIterator[bytes],
    reply: EventReply,
    finish: Callable[[], Awaitable[None]] | None,
    ended: list[bool],
) -> AsyncIterator[bytes]:
    """The stream's complete lines, each read by ``reply``, until its last event (and what
    follows it, unread); ``StreamFault`` if the stream ends before it."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        ready: list[bytes] = []
        for line in lines:
            sent, last = (line, False) if ended[0] else _read(reply, line)
            if last:
                if ready:  # the event's other lines (``event:``) go first
                    yield b"".join(ready)
                    ready = []
                await _finished(finish, ended)
            if sent is not None:
                ready.append(sent + b"\n")
        if ready:
            yield b"".join(ready)
    if not ended[0]:  # the last line, without its line end
        sent, last = _read(reply, buffer)
        buffer = sent or b""
        if last:
            await _finished(finish, ended)
    if not ended[0]:
        raise StreamFault("malformed", f"the upstream stream ended before {reply.last}")
    if buffer:
        yield buffer


def _read(reply: EventReply, line: bytes) -> tuple[bytes | None, bool]:
    """``line`` as the client gets it (None: not at all), and whether it ends the stream."""
    event = event_of(line)
    if event is None:
        return line, False
    sent = reply.add(event)
    if isinstance(sent, Drop):
        return None, reply.ends(event)
    return (line if sent is None else sent), reply.ends(event)


async def _finished(finish: Callable[[], Awaitable[None]] | None, ended: list[bool]) -> None:
    if finish is not None:
        await asyncio.shield(asyncio.ensure_future(finish()))
    ended[0] = True


def event_of(line: bytes) -> dict[str, Any] | None:
    """The JSON object of a ``data:`` line, ``DONE`` for ``data: [DONE]``, None for the other
    lines of an event stream (blank, comment, other fields); ``StreamFault`` for the rest."""
    line = line.rstrip(b"\r")
    field, colon, value = line.partition(b":")
    if not line or not field or (colon and field in (b"event", b"id", b"retry")):
        return None
    if field != b"data":
        raise StreamFault(
            "malformed", f"the upstream stream sent a line that is not SSE: {_shown(line)}"
        )
    value = value.strip()
    if value == b"[DONE]":
        return DONE
    try:
        data = orjson.loads(value)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise StreamFault(
            "malformed", f"the upstream stream sent data that is not JSON: {_shown(line)}"
        )
    if data.get("error"):
        error = data["error"]
        said = error.get("message") if isinstance(error, dict) else error
        raise StreamFault("status", f"the upstream stream reported an error: {said}")
    return data


def _shown(line: bytes) -> str:
    text = line.decode("utf-8", "replace")
    return repr(text if len(text) <= 80 else text[:80] + "…")
