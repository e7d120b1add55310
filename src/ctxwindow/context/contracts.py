"""What the managers are given: archives, redaction modes, event hooks."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeGuard

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


class WatermarkedArchive(ArchiveLike, Protocol):
    """An archive that records how far each session is indexed (``ctxwindow.archive.Archive``).

    ``index(..., through=seq)`` says every entry of the session up to ``seq``
    is now archived; ``indexed_through`` returns the highest such ``seq``.
    An archive without them is indexed as before, and on a cold load gets
    every entry again (indexing is idempotent); see ``watermarked``.
    """

    def index(
        self, session_id: str, entries: Sequence[Entry], *, through: int | None = None
    ) -> object: ...

    def indexed_through(self, session_id: str) -> int: ...


def watermarked(archive: ArchiveLike) -> TypeGuard[WatermarkedArchive]:
    """Whether ``archive`` keeps watermarks: it has ``indexed_through``, and its ``index``
    takes ``through`` (a subclass may override ``index`` without it)."""
    return _keeps_watermarks(type(archive))


@functools.cache
def _keeps_watermarks(kind: type) -> bool:
    index = getattr(kind, "index", None)
    if index is None or not callable(getattr(kind, "indexed_through", None)):
        return False
    try:
        parameters = inspect.signature(index).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume the old contract
        return False
    return any(p.name == "through" or p.kind is p.VAR_KEYWORD for p in parameters)
