"""The archive's queue: what a manager has still to index, session by session.

Every turn a session's window sees is archived, so that recall ranks the
window's turns and the evicted ones alike. A manager queues them here as the
window sees them; its background worker indexes the queue in batches between
requests, and a search first indexes what its session still has queued, so
it sees every turn seen before it (unless a manager's ``search_batches``
cannot hold the backlog: then the worker indexes it while searches go on).
``close`` indexes the rest.

Each batch is indexed in one transaction with the archive's watermark for
the session (``through`` = the batch's highest seq): the queue of a session
runs in seq order from the watermark the session was loaded at, and batches
are taken from its front, so everything up to that seq is then archived. A
batch that fails goes back to the front, and the watermark stays below it.
A process that dies with entries queued leaves them above the watermark:
the next load of the session queues them again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ctxwindow.context.contracts import ArchiveLike, watermarked
from ctxwindow.messages import Entry

BATCH = 256
"""Entries a batch holds at most: one transaction, and the worker's turn for one session."""


class ArchiveQueue:
    """Entries waiting for the archive, by session, sessions in the order they queued.

    Safe across threads (the sync manager's worker is a thread). A session
    whose batch failed is held: the worker leaves it until the session
    queues more or a search (or ``close``) indexes it, so that a broken
    archive is not retried in a loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, list[Entry]] = {}
        self._held: set[str] = set()

    def put(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Queue the session's entries (seen by its window, in seq order)."""
        with self._lock:
            self._pending.setdefault(session_id, []).extend(entries)
            self._held.discard(session_id)

    def next(self) -> str | None:
        """The session that has waited longest, unless held; None when none waits."""
        with self._lock:
            return next((s for s in self._pending if s not in self._held), None)

    def take(self, session_id: str, limit: int = BATCH) -> list[Entry]:
        """The session's first ``limit`` entries, off the queue (the session goes last)."""
        with self._lock:
            pending = self._pending.pop(session_id, [])
            if len(pending) > limit:
                self._pending[session_id] = pending[limit:]
            self._held.discard(session_id)
            return pending[:limit]

    def waiting(self, session_id: str) -> int:
        """How many of the session's entries are queued."""
        with self._lock:
            return len(self._pending.get(session_id, ()))

    def put_back(self, session_id: str, batch: list[Entry]) -> None:
        """A batch that could not be indexed: first again, and the session held."""
        with self._lock:
            self._pending[session_id] = [*batch, *self._pending.get(session_id, [])]
            self._held.add(session_id)

    def discard(self, session_id: str) -> None:
        """Forget what the session has queued (it was deleted)."""
        with self._lock:
            self._pending.pop(session_id, None)
            self._held.discard(session_id)

    def sessions(self) -> list[str]:
        """The sessions that have entries queued."""
        with self._lock:
            return list(self._pending)

    def __len__(self) -> int:
        """How many entries are queued."""
        with self._lock:
            return sum(map(len, self._pending.values()))


def index_batch(archive: ArchiveLike, session_id: str, batch: list[Entry]) -> None:
    """Index a batch taken from the front of the session's queue (blocking)."""
    if watermarked(archive):
        archive.index(session_id, batch, through=max(entry.seq for entry in batch))
    else:
        archive.index(session_id, batch)


def indexed_through(archive: ArchiveLike, session_id: str) -> int:
    """The session's watermark in the archive; 0 if it keeps none (blocking)."""
    return archive.indexed_through(session_id) if watermarked(archive) else 0
