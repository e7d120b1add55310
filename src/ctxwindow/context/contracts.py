"""What the managers are given: archives, redaction modes, event hooks, the core's settings."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeGuard

from ctxwindow.messages import Entry
from ctxwindow.recall import RecallPolicy

if TYPE_CHECKING:
    from ctxwindow.context.policy import Policy
    from ctxwindow.context.session import HotSessions
    from ctxwindow.redact.redactor import RedactFn
    from ctxwindow.tokens.registry import ModelRegistry

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


@dataclass(frozen=True, kw_only=True)
class CoreSettings:
    """What both managers' shared core is built from: the manager's keywords but for the
    store and the manager's own (``prefetch``, ``lock_timeout``, ``search_batches``).

    A manager builds it once from its keywords (``AsyncContextManager`` says what each
    means); the core derives the rest (tokenizer, reply reserve, budget in tokens, policy).

    >>> CoreSettings(model="gpt-4o-mini", budget=2000).redact
    'storage'
    >>> CoreSettings(redact="upstream")
    Traceback (most recent call last):
    ValueError: redact must be one of ('storage', 'context'), got 'upstream'
    """

    model: str = "gpt-4o"
    policy: Policy | None = None
    archive: ArchiveLike | None = None
    summarizer: Any = None
    redactor: RedactFn | None = None
    budget: int | float = 0.75
    reserve_output: int | None = None
    recall: RecallPolicy = field(default_factory=RecallPolicy)
    hot_sessions: int | HotSessions = 256
    redact: RedactAt = "storage"
    on_event: EventHook | None = None
    models: ModelRegistry | None = None
    prompt_cache: bool = True

    def __post_init__(self) -> None:
        if self.redact not in REDACT_AT:
            raise ValueError(f"redact must be one of {REDACT_AT}, got {self.redact!r}")
