"""A session's window and what the manager knows about it; whole units of archived entries."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from ctxwindow.context.question import Question
from ctxwindow.messages import Entry, Message, Unit, tool_call_ids
from ctxwindow.policies import Window


class Session:
    """A session's window and what the manager knows about it."""

    def __init__(self, session_id: str, window: Window, owner: object = None) -> None:
        self.id = session_id
        self.window = window
        self.owner = owner  # the manager whose model and budget the window counts for
        self.last_seq = 0  # the highest store seq the window has seen
        self.last_id = ""  # the id of that entry (a session deleted and rebuilt differs)
        self.checkpointed = 0  # the seq of the session's last checkpoint known here
        # The window replayed the entries after this seq only (and, of those before it,
        # the ones kept at any budget): 0 when loaded whole. What the archive may lack.
        self.replayed_after = 0
        # The candidates found for a query, (score, unit) best first (prefetched or reused).
        self.recall: tuple[str, list[tuple[float, Unit]]] | None = None
        # Whole archived units read for recall, by store seq, the least recently used first.
        self.units: OrderedDict[int, Unit] = OrderedDict()
        self.unarchived: list[Entry] = []  # seen by the window, not yet queued for the archive
        self.whole = True  # nothing has left the window yet (told by its on_evict)
        self.question: Question | None = None  # the newest user turn, while nothing answers it
        # With the prompt cache in mind: the units recalled by earlier turns, each before
        # the user turn it was recalled for; sent again until the window's next step.
        self.sticky: list[Unit] = []
        self.calm = 0  # with the prompt cache: builds left before recall may step again
        # The newest messages compressed for contexts, by (seq, size): see keep_squeezed.
        self.squeezed: dict[tuple[int, int], Unit | None] = {}
        window.on_evict = self.evicted
        # With redact="context": message id -> (message, redacted copy, token change),
        # for the messages of the last context (each message is redacted once).
        self.redacted: dict[int, tuple[Message, Message, int]] = {}

    def evicted(self, units: list[Unit]) -> None:
        self.whole = False
        self.sticky = []  # the window stepped: the prefix changes anyway


class HotSessions:
    """The sessions kept in memory, least recently used dropped first: one window a session.

    Managers over one store may share it (pass it as ``hot_sessions``), as the
    service does for its models: a session then keeps one window, counted for
    the model that last asked; another model's request replaces it with a
    window of its own, loaded from the store with the stored counts.
    """

    def __init__(self, size: int = 256) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"hot_sessions must be a positive int, got {size!r}")
        self.size = size
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def get(self, session_id: str, owner: object) -> Session | None:
        """The session's window if it is ``owner``'s; None if absent or another's."""
        session = self._sessions.get(session_id)
        if session is None or session.owner is not owner:
            return None
        self._sessions.move_to_end(session_id)
        return session

    def put(self, session: Session) -> None:
        self._sessions[session.id] = session
        self._sessions.move_to_end(session.id)
        while len(self._sessions) > self.size:
            self._sessions.popitem(last=False)

    def pop(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)


AROUND = 32  # stored entries read around a recalled tool message to find its unit
CACHED_UNITS = 4096
"""Archived entries a session keeps decoded, in their units, for its next queries (those its
window saw are kept as they come, ``Core.restore``): what one query reads at most
(``RecallPolicy.max_depth`` hits and their neighbours) fits."""


def waiting_after(pending: frozenset[str], message: Message) -> frozenset[str]:
    """The tool calls waiting for results once ``message`` (admitted) is added."""
    if message["role"] == "tool":
        return pending - {message["tool_call_id"]}
    return frozenset(tool_call_ids(message)) if message.get("tool_calls") else pending


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
