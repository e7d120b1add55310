"""Pauses between the attempts of a poll, shared by both flavours."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ctxwindow.errors import SessionBusyError

FIRST_PAUSE = 0.002  # seconds between the first attempts; doubled after each one
LONGEST_PAUSE = 0.05


def pauses(deadline: float | None) -> Iterator[float]:
    """Sleeps between attempts, never past ``deadline`` (a ``time.monotonic()`` value)."""
    pause = FIRST_PAUSE
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        yield pause if left is None else min(pause, left)
        pause = min(2 * pause, LONGEST_PAUSE)


def busy(session_id: str) -> SessionBusyError:
    return SessionBusyError(f"session {session_id!r} is held by another request; gave up waiting")
