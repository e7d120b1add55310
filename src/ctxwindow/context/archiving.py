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

What a cold load did not replay (the entries a checkpoint covered, or those
before the newest that fill the budget) is queued as a range of seqs, not
read: the manager reads it from the store a batch at a time, before the
session's queued entries, so a long backlog costs memory for one batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager

from ctxwindow.context.contracts import ArchiveLike, watermarked
from ctxwindow.messages import Entry

BATCH = 256
"""Entries a batch holds at most: one transaction, and the worker's turn for one session."""

BACKLOG_BATCH = 16
"""Stored entries a batch of a backlog holds at most: a short step (see ``Turns``)."""

QUIET = 1.0
"""Seconds without a turn after which the worker reads backlogs at full speed."""

BUSY_EVERY = 5.0
"""Seconds between two batches of backlogs while the manager is not quiet."""


class Turns:
    """The turns of a manager under way, and whether its worker may index a session now.

    A turn's entries wait for its end: the worker leaves a session alone
    while a turn of it is under way, then indexes what the turn added in one
    batch (a user message and its reply: one transaction and one hand-off to
    the worker, not two; a search still indexes them at once). A backlog of
    the session goes on meanwhile, as below.

    A backlog (what a cold load did not replay: up to a whole long session)
    can take minutes to embed, and on a small machine each batch slows the
    turns it runs beside (the embedder takes the cores and the GIL). So the
    worker reads backlogs at full speed once no turn has run for ``QUIET``
    seconds, and a batch every ``BUSY_EVERY`` seconds otherwise, so that a
    backlog still moves under steady traffic. Safe across threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._under_way: set[str] = set()  # (the store's lock: one turn of a session at a time)
        self._ended = self._backlog_at = time.monotonic()

    @contextmanager
    def of(self, session_id: str) -> Iterator[None]:
        """A turn of the session, under way while in the block."""
        with self._lock:
            self._under_way.add(session_id)
        try:
            yield
        finally:
            with self._lock:
                self._under_way.discard(session_id)
                self._ended = time.monotonic()

    def under_way(self) -> frozenset[str]:
        """The sessions a turn holds now."""
        with self._lock:
            return frozenset(self._under_way)

    def backlog_now(self) -> bool:
        """Whether a backlog's batch may run now."""
        now = time.monotonic()
        with self._lock:
            quiet = not self._under_way and now - self._ended >= QUIET
            return quiet or now >= self._backlog_at

    def defer_backlog(self) -> None:
        """A backlog was queued, or its batch runs: the next batch ``BUSY_EVERY`` seconds
        on, unless the manager is quiet before."""
        with self._lock:
            self._backlog_at = time.monotonic() + BUSY_EVERY


class Indexing:
    """How many entries, taken off the queue, are being indexed now; safe across threads
    (the sync manager's worker and its callers index different sessions at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @contextmanager
    def of(self, batch: Sequence[Entry]) -> Iterator[None]:
        """Count ``batch`` while it is indexed."""
        with self._lock:
            self._count += len(batch)
        try:
            yield
        finally:
            with self._lock:
                self._count -= len(batch)


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
        # (after, through): the session's stored entries to read first, a batch at a time.
        self._stored: dict[str, tuple[int, int]] = {}

    def put(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Queue the session's entries (seen by its window, in seq order)."""
        with self._lock:
            self._pending.setdefault(session_id, []).extend(entries)
            self._held.discard(session_id)

    def put_stored(self, session_id: str, after: int, through: int) -> None:
        """Queue the session's stored entries ``after < seq <= through``, ahead of the
        entries it queues (they come before them)."""
        if through <= after:
            return
        with self._lock:
            self._stored[session_id] = (after, through)
            self._pending.setdefault(session_id, [])
            self._held.discard(session_id)

    def stored(self, session_id: str) -> tuple[int, int] | None:
        """The range of stored entries the session has still to read, or None."""
        with self._lock:
            return self._stored.get(session_id)

    def read(self, session_id: str, through: int) -> None:
        """The session's stored entries up to ``through`` are indexed: the range moves on
        (gone when done), and the session goes last."""
        with self._lock:
            span = self._stored.get(session_id)
            if span is None:
                return
            if through >= span[1]:
                del self._stored[session_id]
            else:
                self._stored[session_id] = (max(through, span[0]), span[1])
            entries = self._pending.pop(session_id, [])
            if entries or session_id in self._stored:
                self._pending[session_id] = entries

    def hold(self, session_id: str) -> None:
        """A range that could not be read or indexed: the session is held (see ``put_back``)."""
        with self._lock:
            self._held.add(session_id)

    def next(self, *, stored: bool = True, busy: Collection[str] = ()) -> str | None:
        """The session that has waited longest, unless held; None when none waits.
        ``stored=False``: not one with stored entries to read (a backlog) first. ``busy``:
        the sessions a turn holds, passed over unless they have a backlog to read (what
        the turn adds waits for its end; a backlog goes on at its own pace, ``Turns``)."""
        with self._lock:
            ready = (
                s
                for s in self._pending
                if s not in self._held and (s not in busy or s in self._stored)
            )
            return next((s for s in ready if stored or s not in self._stored), None)

    def backlogged(self) -> bool:
        """Whether a session that is not held has stored entries to read."""
        with self._lock:
            return any(s not in self._held for s in self._stored)

    def take(self, session_id: str, limit: int = BATCH) -> list[Entry]:
        """The session's first ``limit`` entries, off the queue (the session goes last);
        none while it has stored entries to read first (``stored``)."""
        with self._lock:
            if session_id in self._stored:
                return []
            pending = self._pending.pop(session_id, [])
            if len(pending) > limit:
                self._pending[session_id] = pending[limit:]
            self._held.discard(session_id)
            return pending[:limit]

    def waiting(self, session_id: str) -> int:
        """How many of the session's entries are queued (a stored range's included)."""
        with self._lock:
            return len(self._pending.get(session_id, ())) + _span(self._stored.get(session_id))

    def put_back(self, session_id: str, batch: list[Entry]) -> None:
        """A batch that could not be indexed: first again, and the session held."""
        with self._lock:
            self._pending[session_id] = [*batch, *self._pending.get(session_id, [])]
            self._held.add(session_id)

    def discard(self, session_id: str) -> None:
        """Forget what the session has queued (it was deleted)."""
        with self._lock:
            self._pending.pop(session_id, None)
            self._stored.pop(session_id, None)
            self._held.discard(session_id)

    def sessions(self) -> list[str]:
        """The sessions that have entries queued."""
        with self._lock:
            return list(self._pending)

    def __len__(self) -> int:
        """How many entries are queued (stored ranges included)."""
        with self._lock:
            return sum(map(len, self._pending.values())) + sum(map(_span, self._stored.values()))


def _span(span: tuple[int, int] | None) -> int:
    return 0 if span is None else span[1] - span[0]


def index_batch(
    archive: ArchiveLike, session_id: str, batch: list[Entry], through: int | None = None
) -> None:
    """Index a batch taken from the front of the session's queue (blocking): the
    watermark goes to ``through`` (default: the batch's highest seq)."""
    if watermarked(archive):
        archive.index(session_id, batch, through=through or max(entry.seq for entry in batch))
    else:
        archive.index(session_id, batch)


def indexed_through(archive: ArchiveLike, session_id: str) -> int:
    """The session's watermark in the archive; 0 if it keeps none (blocking)."""
    return archive.indexed_through(session_id) if watermarked(archive) else 0
