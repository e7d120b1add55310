"""Relaying the event streams of the Responses and Messages APIs while collecting the reply.

Like ``upstream.sse_reply`` for chat completions, but the stream ends with an
event of the protocol (``response.completed``, ``message_stop``) rather than
``data: [DONE]``, an event may be rewritten on its way (a response's id), and
the error event that replaces a broken end is the protocol's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import httpx

from ctxwindow.server.errors import APIError
from ctxwindow.server.upstream import Relayed, StreamFault, closed_late, event_of


class EventReply(Protocol):
    """What a relay needs of a protocol: the reply collected from its events."""

    def add(self, event: dict[str, Any]) -> bytes | None:
        """Take one event (``StreamFault`` if it reports a failure); the ``data:`` line to
        send in its place, or None to send it as it came."""

    def ends(self, event: dict[str, Any]) -> bool:
        """Whether ``event`` is the stream's last: the reply is stored before it is sent."""

    def error_event(self, error: APIError) -> bytes:
        """``error`` as the event this protocol's SDKs raise on."""


async def relay(
    response: httpx.Response,
    reply: EventReply,
    finish: Callable[[], Awaitable[None]] | None = None,
    failed: Callable[[StreamFault], None] | None = None,
) -> AsyncIterator[bytes]:
    """The stream's bytes for the client, lines whole; ``finish()`` (storing the reply) runs
    before the last event is passed on, and a stream that does not end properly ends with
    ``reply.error_event`` instead (``failed`` is told; ``finish`` never runs). A transport
    error after the last event is logged and counted, not sent (``closed_late``)."""
    relayed = Relayed()
    try:
        async for piece in _checked(response.aiter_bytes(), reply, finish, relayed):
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
    finally:
        await response.aclose()
    if relayed.ended:  # the upstream closed badly after its last event: the reply is whole
        yield closed_late(fault, failed)
        return
    if failed is not None:
        failed(fault)
    yield reply.error_event(fault)


async def _checked(
    chunks: AsyncIterator[bytes],
    reply: EventReply,
    finish: Callable[[], Awaitable[None]] | None,
    relayed: Relayed,
) -> AsyncIterator[bytes]:
    buffer, done = b"", False
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        ready: list[bytes] = []
        for line in lines:
            event = None if done else event_of(line)
            if event:
                line = reply.add(event) or line
                if reply.ends(event):
                    if ready:  # the event's other fields (``event:``) go first
                        yield b"".join(ready)
                        ready = []
                    if finish is not None:
                        await asyncio.shield(asyncio.ensure_future(finish()))
                    done = relayed.ended = True
            ready.append(line + b"\n")
        if ready:
            yield b"".join(ready)
    if not done and (event := event_of(buffer)):  # the last line, without its line end
        buffer = reply.add(event) or buffer
        if reply.ends(event):
            if finish is not None:
                await asyncio.shield(asyncio.ensure_future(finish()))
            done = relayed.ended = True
    if not done:
        raise StreamFault("malformed", "the upstream stream ended before its last event")
    if buffer:
        yield buffer
