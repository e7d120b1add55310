"""A session's window and what the manager knows about it; whole units of archived entries."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwindow.messages import Entry, Message, Unit
from ctxwindow.policies import Window


class Session:
    """A session's window and what the manager knows about it."""

    def __init__(self, session_id: str, window: Window) -> None:
        self.id = session_id
        self.window = window
        self.last_seq = 0  # the highest store seq the window has seen
        self.last_id = ""  # the id of that entry (a session deleted and rebuilt differs)
        # The candidates found for a query, (score, unit) best first (prefetched or reused).
        self.recall: tuple[str, list[tuple[float, Unit]]] | None = None
        self.units: dict[int, Unit] = {}  # whole archived units read for recall, by store seq
        self.unarchived: list[Entry] = []  # seen by the window, not yet in the archive
        self.whole = True  # nothing has left the window yet (told by its on_evict)
        window.on_evict = self.evicted
        # With redact="context": message id -> (message, redacted copy, token change),
        # for the messages of the last context (each message is redacted once).
        self.redacted: dict[int, tuple[Message, Message, int]] = {}

    def evicted(self, units: list[Unit]) -> None:
        self.whole = False


AROUND = 32  # stored entries read around a recalled tool message to find its unit
CACHED_UNITS = 4096  # archived units a session keeps decoded for its next queries


def in_tool_unit(entry: Entry) -> bool:
    return entry.message["role"] == "tool" or bool(entry.message.get("tool_calls"))


def after_for(entry: Entry) -> int:
    return max(entry.seq - AROUND // 2, 0)


def unit_of(entry: Entry, around: Sequence[Entry] | None) -> Unit:
    """A recalled entry as a whole unit: with its call and results when ``around`` is given."""
    entries = [entry] if around is None else _unit_around(around, entry)
    return Unit(entries, sum(e.tokens for e in entries))


def _unit_around(entries: Sequence[Entry], hit: Entry) -> list[Entry]:
    """The tool unit (assistant call + its results) that contains ``hit``."""
    index = next(i for i, e in enumerate(entries) if e.id == hit.id)
    start = index
    while start > 0 and entries[start].message["role"] == "tool":
        start -= 1
    end = start + 1
    while end < len(entries) and entries[end].message["role"] == "tool":
        end += 1
    return list(entries[start:end])
