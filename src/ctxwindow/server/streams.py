"""Streamed replies that hold their session until they are sent, and the app's record of them.

A streamed reply is a ``HeldStream``: it releases its session (and its
request slot) once the client has it, after its reply is stored. That last
step runs shielded, so a client that leaves does not cut it short; each app's
``Streams`` (``Service.streams``) keeps the ones still running, and shutting
down waits for them before the store closes under them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.responses import ContentStream, StreamingResponse

from ctxwindow.context import AsyncContextManager
from ctxwindow.server.errors import APIError


class Streams:
    """One app's streamed replies still finishing: storing their reply, releasing their
    session."""

    def __init__(self) -> None:
        self._finishing: set[asyncio.Future[None]] = set()

    def track(self, finishing: asyncio.Future[None]) -> None:
        """Keep ``finishing`` until it is done."""
        self._finishing.add(finishing)
        finishing.add_done_callback(self._finishing.discard)

    async def finished(self, timeout: float = 10.0) -> None:
        """Wait (up to ``timeout`` s) for the streams of this event loop still finishing."""
        loop = asyncio.get_running_loop()
        pending = [f for f in self._finishing if f.get_loop() is loop and not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)


class HeldStream(StreamingResponse):
    """A streamed reply that releases the session once it is sent (or the client left).

    Releasing here, not in the body's generator, also covers a client gone
    before the first chunk: the generator then never starts, so its
    ``finally`` would never run.
    """

    release: Callable[[], Awaitable[Any]] | None = None
    turn: tuple[AsyncContextManager, str] | None = None  # the session's turn it carries on
    storing: asyncio.Future[None] | None = None  # the reply being stored
    slot: Callable[[], None] | None = None  # gives back the request's slot (``in_slot``)

    def __init__(
        self,
        content: ContentStream,
        *,
        streams: Streams,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
    ) -> None:
        super().__init__(content, headers=headers, media_type=media_type)
        self.streams = streams

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            if self.turn is None:
                await super().__call__(scope, receive, send)
            else:
                manager, sid = self.turn
                with manager.carry_on(sid):  # storing the reply must not wait for itself
                    await super().__call__(scope, receive, send)
        finally:
            # Shielded: a cancelled response still stores its reply and releases the
            # session; tracked so that shutting down waits for it (else the store is
            # closed under it, and its last call opens a connection nobody closes).
            finishing = asyncio.ensure_future(self._finish())
            self.streams.track(finishing)
            await asyncio.shield(finishing)

    async def _finish(self) -> None:
        """Release the session only once the reply is stored: the next turn must see it."""
        try:
            if self.storing is not None:
                await self.storing
        except APIError:
            pass  # the reply could not be stored: the client was sent it as an error event
        finally:
            if self.slot is not None:
                self.slot()
            if self.release is not None:
                await self.release()
