"""What the managers are given: archives, redaction modes, event hooks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from ctxwindow.messages import Entry

# Told of work as it happens (for metrics): ("compressed", entries),
# ("summary_updated", 1), ("recall_seconds", seconds of one archive search).
EventHook = Callable[[str, float], None]

RedactAt = Literal["storage", "context"]
REDACT_AT = ("storage", "context")


class ArchiveLike(Protocol):
    """What the manager needs of an archive (see ``ctxwindow.archive``)."""

    def index(self, session_id: str, entries: Sequence[Entry]) -> object: ...

    def search(self, session_id: str, query: str, *, k: int = 5) -> Sequence[Any]: ...

    def at(self, session_id: str, seqs: Sequence[int]) -> Sequence[Entry]: ...

    def forget(self, session_id: str) -> object: ...
