"""Which sessions the current thread or task holds a turn of."""

from __future__ import annotations

from contextvars import ContextVar

# The sessions the current thread or task holds a turn of: (id of the store, session id).
HELD: ContextVar[frozenset[tuple[int, str]]] = ContextVar("ctxwindow_held", default=frozenset())


def holding(
    held: frozenset[tuple[int, str]], store: object, session_id: str
) -> frozenset[tuple[int, str]] | None:
    """The sessions held inside a new turn of ``session_id``; None if it is held already."""
    key = (id(store), session_id)
    return None if key in held else held | {key}
